#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# munge key responder: runs on every node that holds the cluster's munge key (systemd
# unit gpu-cluster-munge-responder, or a background process in direct mode) and
# answers join requests on /fsx (see munge-join.sh). The controller answers within
# seconds; workers wait until a request is MUNGE_WORKER_MIN_AGE s old, so they only
# step in when the controller is gone (replaced) and 1000 nodes do not race.
# On workers it also follows a replaced controller: when FSX_ROOT/controller.env
# differs from the one step 50 used, it re-runs `gpu-cluster-boot --only slurm` in the
# background (never while another boot holds the lock).
# On the controller it also deletes stale dynamic nodes (lib/node-reaper.sh): a replaced
# node registers under a new name, and the one it replaced would stay DOWN for ever.
# And it keeps a maintenance reservation and drain at each Capacity Block's end
# (lib/block-end.sh): no job may run across it. And it lists nodes whose boot failed
# for good in Slurm, drained or down with the reason (lib/boot-failures.sh). And it
# gates nodes that register into the running cluster before they take jobs
# (lib/join-gate.sh). And it keeps Slurm's topology.conf in step with EC2's network
# topology as nodes join and leave (lib/topology.sh), before the join gate's turn. And it
# replaces or isolates nodes drained for hardware, by the stack's repair.policy
# (lib/repair.sh). And with accounting it keeps slurmdbd's database login current
# (lib/accounting.sh: RDS rotates the secret). And it runs deep DCGM diagnostics on idle
# nodes in a reservation, on a schedule (lib/dcgm.sh). And with `logs` it publishes the
# cluster's metrics to CloudWatch (lib/metrics.sh).
# On every node: when the cluster's key fingerprint changes away from the key this
# node holds (the controller rotated it, see step 40), it rejoins (follow_key).
# Prerequisites: /etc/gpu-cluster/cluster.env, /var/lib/gpu-cluster/identity.env.
set -euo pipefail
: "${GPU_CLUSTER_ETC:=/etc/gpu-cluster}"
set -a
# shellcheck source=/dev/null
. "$GPU_CLUSTER_ETC/cluster.env"
# shellcheck source=/dev/null
if [[ -r $GPU_CLUSTER_ETC/overrides.env ]]; then . "$GPU_CLUSTER_ETC/overrides.env"; fi
set +a
export GC_STEP=munge-responder
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"
# shellcheck source=lib/munge-join.sh
. "$GPU_CLUSTER_HOME/lib/munge-join.sh"
# shellcheck source=lib/node-reaper.sh
. "$GPU_CLUSTER_HOME/lib/node-reaper.sh"
# shellcheck source=lib/block-end.sh
. "$GPU_CLUSTER_HOME/lib/block-end.sh"
# shellcheck source=lib/boot-failures.sh
. "$GPU_CLUSTER_HOME/lib/boot-failures.sh"
# shellcheck source=lib/join-gate.sh
. "$GPU_CLUSTER_HOME/lib/join-gate.sh"
# shellcheck source=lib/topology.sh
. "$GPU_CLUSTER_HOME/lib/topology.sh"
# shellcheck source=lib/repair.sh
. "$GPU_CLUSTER_HOME/lib/repair.sh"
# shellcheck source=lib/accounting.sh
. "$GPU_CLUSTER_HOME/lib/accounting.sh"
# shellcheck source=lib/dcgm.sh
. "$GPU_CLUSTER_HOME/lib/dcgm.sh"
# shellcheck source=lib/metrics.sh
. "$GPU_CLUSTER_HOME/lib/metrics.sh"

# boot_detached ARGS: run gpu-cluster-boot ARGS in the background, outside this
# service: under systemd as a transient unit (a child would live in this unit's cgroup
# and be killed when the responder restarts), in direct mode as its own session.
boot_detached() {
  if [[ $GPU_CLUSTER_SERVICE_MANAGER == systemd ]]; then
    systemd-run --quiet --collect --no-block --unit="gpu-cluster-boot-$(date +%s)" \
      "$GPU_CLUSTER_HOME/bin/gpu-cluster-boot" "$@" || warn "systemd-run gpu-cluster-boot $* failed"
  else
    setsid "$GPU_CLUSTER_HOME/bin/gpu-cluster-boot" "$@" >/dev/null 2>&1 </dev/null &
  fi
}

follow_controller() {
  local published="$FSX_ROOT/controller.env" used="$GPU_CLUSTER_STATE/controller.env"
  [[ -s $published && -s $used ]] && ! cmp -s "$published" "$used" || return 0
  flock -n "$GPU_CLUSTER_RUN/boot.lock" true 2>/dev/null || return 0
  log "the controller changed ($(tr '\n' ' ' <"$published")); re-running step 50-slurm"
  boot_detached --only slurm
}

# reap: at most once a minute, on the controller, once slurmctld runs here.
LAST_REAP=-3600
reap() {
  local line
  ((SECONDS - LAST_REAP >= 60)) || return 0
  LAST_REAP=$SECONDS
  while IFS= read -r line; do log "$line"; done < <(reap_stale_nodes "$NODE_REAP_GRACE" "$JOIN_PENDING_PREFIX")
  while IFS= read -r line; do log "$line"; done < <(report_boot_failures "$FSX_ROOT/status" "$FSX_ROOT/status/reported")
}

# follow_key: the cluster's key changed under us (the controller found no holder and
# rotated it while this node could not answer, e.g. cut off from /fsx). Re-run the
# boot from step 40: it joins for the new key, restarts munged, then slurmd.
LAST_REJOIN=-3600
follow_key() {
  ((SECONDS - LAST_REJOIN >= 60)) || return 0
  flock -n "$GPU_CLUSTER_RUN/boot.lock" true 2>/dev/null || return 0
  LAST_REJOIN=$SECONDS
  log "the cluster's munge key changed (generation $(cat "$FSX_ROOT/munge/key.generation" 2>/dev/null || echo '?')); re-running gpu-cluster-boot --from munge to rejoin"
  boot_detached --from munge
}

# nap SECONDS: the controller's pause between passes, cut short (within 0.2 s) when a join
# request arrives that was not pending when the pause began: a booting node gets the key
# at once instead of up to SECONDS later. A request it cannot answer (a bad certificate)
# is still pending at the next pause, so it does not keep waking it.
nap() {
  local i before
  mj_pending "$m/requests" "$m/responses"
  before=$MJ_PENDING
  for ((i = 0; i < $1 * 5; i++)); do
    sleep 0.2
    mj_pending "$m/requests" "$m/responses"
    [[ $MJ_PENDING == "$before" ]] || return 0
  done
}

main() {
  local interval=$MUNGE_CONTROLLER_INTERVAL min_age=0 n m="$FSX_ROOT/munge"
  load_identity
  if ! is_controller; then interval=$MUNGE_WORKER_INTERVAL min_age=$MUNGE_WORKER_MIN_AGE; fi
  log "answering munge join requests in $m/requests every ${interval}s (min age ${min_age}s)"
  while true; do
    if fsx_root_ready && [[ -s $m/key.sha256 && $(key_fingerprint "$MUNGE_KEY") == "$(<"$m/key.sha256")" ]]; then
      n=$(mj_answer "$MUNGE_KEY" "$m/requests" "$m/responses" "$min_age")
      if ((n > 0)); then log "answered $n join request(s)"; fi
      mj_gc "$m/requests" "$m/responses"
      if is_controller; then reap; block_end_tick; topology_tick; join_gate_tick; repair_tick; accounting_tick; dcgm_tick; metrics_tick; else follow_controller; fi
    elif fsx_root_ready && [[ -s $m/key.sha256 ]]; then
      follow_key
    fi
    if is_controller; then nap "$interval"; else sleep "$interval"; fi
  done
}

main "$@"
