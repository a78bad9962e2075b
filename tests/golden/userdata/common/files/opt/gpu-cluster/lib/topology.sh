# shellcheck shell=bash
# Slurm's network topology (slurm.topology: tree): sourced, never run.
# - topology_install (step 50, every node, before slurmctld/slurmd start): with
#   TopologyPlugin=topology/tree both daemons read /etc/slurm/topology.conf at start and
#   stop when it is missing. A node takes the controller's published copy
#   (FSX_ROOT/topology/topology.conf) when there is one, else the template without any
#   switch (Slurm then schedules as if no topology were loaded).
# - topology_tick (the controller's agent loop, lib/munge-responder.sh): runs
#   lib/topology.py refresh (EC2 DescribeInstanceTopology -> topology.conf ->
#   `scontrol reconfigure`) when the set of Slurm nodes changed (a node joined, a
#   replacement registered, the reaper removed one), every TOPOLOGY_RETRY s while nodes
#   stay flat for want of an answer (EC2's answer lags a launch), after a failed refresh
#   every TOPOLOGY_RETRY s, and otherwise every TOPOLOGY_INTERVAL s. It runs before the
#   join gate in the same loop, so a newcomer is in topology.conf before its gate job.
#   A failure is said once per kind (not at every tick) and leaves the topology as it was.
# Prerequisites: common.sh (log, warn, install -m); boot-failures.sh (BOOT_FAILED_PREFIX)
# for topology_current and the tick (step 95 and the agent loop source it first; step 50
# uses topology_install, and topology_enabled for its PMIx check); Slurm clients; FSX_ROOT
# mounted.

TOPOLOGY_CONF=${TOPOLOGY_CONF:-/etc/slurm/topology.conf}
TOPOLOGY_TEMPLATE=${TOPOLOGY_TEMPLATE:-${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/templates/topology.conf}

topology_enabled() { [[ ${TOPOLOGY_PLUGIN:-none} != none ]]; }

# topology_install: stdout the topology.conf this node starts with (install_if_changed reads it).
topology_install() {
  local published="$FSX_ROOT/topology/topology.conf"
  if [[ -s $published ]]; then cat "$published"; else cat "$TOPOLOGY_TEMPLATE"; fi
}

# topology_nodes_key: one line that changes when Slurm's node set does.
# Nothing (and status 0) while slurmctld does not answer: the agent loop runs under
# `set -e` from step 40 on, before step 50 starts slurmctld, and a failing pipeline here
# ended the loop at its first pass (systemd restarted it 10 s later).
topology_nodes_key() {
  local out
  out=$(sinfo -h -N -o '%N|%E' 2>/dev/null) || return 0
  { grep -v "^[^|]*|${BOOT_FAILED_PREFIX:?}" <<<"$out" || true; } | cut -d'|' -f1 | sort -u | md5sum | cut -c1-32
}

# The placeholders of failed boots (lib/boot-failures.sh: down, never registered, reason
# BOOT_FAILED_PREFIX). They are not in the set above nor in topology.conf (no instance to
# place), but `scontrol reconfigure` drops a node that never registered (seen on 23.11):
# after a refresh, each one it dropped has its reported record removed, so the reaper's
# next pass (within a minute) lists it again.
topology_placeholders() {
  local out
  out=$(sinfo -h -N -o '%N|%E' 2>/dev/null) || return 0
  { grep "^[^|]*|${BOOT_FAILED_PREFIX:?}" <<<"$out" || true; } | cut -d'|' -f1 | sort -u
}

topology_relist_dropped() {
  local node
  for node in "$@"; do
    scontrol show node "$node" >/dev/null 2>&1 && continue
    rm -f "$FSX_ROOT/status/reported/$node"
    log "topology: the reconfigure dropped $node's boot-failure listing; the reaper lists it again"
  done
}

TOPOLOGY_LAST=-86400 TOPOLOGY_CHANGED=-86400 TOPOLOGY_KEY="" TOPOLOGY_NEXT=0 TOPOLOGY_SAID=""
# topology_say KIND MESSAGE: log MESSAGE when KIND differs from the last one said, so a
# refresh that says the same thing every minute (the same nodes flat, the same refusal)
# is logged once.
topology_say() {
  [[ $1 != "$TOPOLOGY_SAID" ]] || return 0
  TOPOLOGY_SAID=$1
  if [[ $1 == ok* ]]; then log "$2"; else warn "$2"; fi
}

# topology_refresh: one run of the program; sets TOPOLOGY_NEXT (seconds to the next run):
# TOPOLOGY_RETRY after a failure, or while nodes stay flat within TOPOLOGY_SETTLE s of
# the last change (EC2's answer may lag a launch), else TOPOLOGY_INTERVAL.
topology_refresh() {
  local out rc flat placeholders
  mapfile -t placeholders < <(topology_placeholders)
  out=$(timeout --kill-after=10 "${TOPOLOGY_TIMEOUT:-180}" "$GPU_CLUSTER_AWS_PYTHON" \
    "$GPU_CLUSTER_HOME/lib/topology.py" --fsx-root "$FSX_ROOT" --conf "$TOPOLOGY_CONF" \
    --plugin "$TOPOLOGY_PLUGIN" refresh 2>&1) && rc=0 || rc=$?
  if ((rc != 0)); then
    TOPOLOGY_NEXT=${TOPOLOGY_RETRY:-60}
    topology_say "failed $rc ${out//[0-9]/}" "topology refresh failed (status $rc; the topology stays as it was; next try in ${TOPOLOGY_NEXT}s): ${out//$'\n'/ }"
    return 0
  fi
  topology_say "ok ${out//unchanged/applied}" "${out//$'\n'/; }"
  if [[ $out == *"scontrol reconfigure ok"* ]]; then topology_relist_dropped "${placeholders[@]}"; fi
  flat=$(grep -o ', [0-9]* flat)' <<<"$out" | tail -n 1 | tr -dc 0-9)
  TOPOLOGY_NEXT=${TOPOLOGY_INTERVAL:-1800}
  if ((${flat:-0} > 0 && SECONDS - TOPOLOGY_CHANGED < ${TOPOLOGY_SETTLE:-900})); then TOPOLOGY_NEXT=${TOPOLOGY_RETRY:-60}; fi
}

# topology_current: refresh now when Slurm's node set changed since the last refresh.
# Before a job that names nodes (the join gate's) or counts them (the first-boot gate's):
# Slurm refuses a job that needs a node no switch reaches ("Requested node configuration
# is not available", measured on 22.05 and 24.11), and a node created since the last
# reconfigure is under no switch.
topology_current() {
  local key
  topology_enabled && [[ -x ${GPU_CLUSTER_AWS_PYTHON:-} ]] || return 0
  key=$(topology_nodes_key)
  [[ -n $key && $key != "$TOPOLOGY_KEY" ]] || return 0
  log "topology: the set of Slurm nodes changed; reading EC2's network topology"
  TOPOLOGY_KEY=$key TOPOLOGY_LAST=$SECONDS TOPOLOGY_CHANGED=$SECONDS TOPOLOGY_SAID=""
  topology_refresh
}

# topology_tick: the agent loop's hook (controller, slurmctld answering).
topology_tick() {
  topology_enabled || return 0
  if [[ ! -x ${GPU_CLUSTER_AWS_PYTHON:-} ]]; then
    topology_say no-python "topology: ${GPU_CLUSTER_AWS_PYTHON:-the node venv python} is missing (step 20 installs it); Slurm keeps the layout it has"
    return 0
  fi
  if [[ $(topology_nodes_key) != "$TOPOLOGY_KEY" ]]; then topology_current; return 0; fi
  ((SECONDS - TOPOLOGY_LAST >= TOPOLOGY_NEXT)) || return 0
  TOPOLOGY_LAST=$SECONDS
  topology_refresh
}
