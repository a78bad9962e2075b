#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 95: hand-off (controller only). Waits, bounded by VALIDATION_WAIT_MINUTES, until
# the expected number of nodes (GpuClusterNodes tag) is idle in the partition, then
# submits the first-boot validation job once per cluster and records its id
# (FSX_ROOT/validation/first-boot.jobid, and this node's status). Says so when
# validation is disabled or the job file is not shipped.
# Prerequisites: steps 50-90.
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"
# shellcheck source=lib/join-gate.sh
. "$GPU_CLUSTER_HOME/lib/join-gate.sh"
# shellcheck source=lib/boot-failures.sh
. "$GPU_CLUSTER_HOME/lib/boot-failures.sh"
# shellcheck source=lib/topology.sh
. "$GPU_CLUSTER_HOME/lib/topology.sh"

idle_nodes() { sinfo -h -p "$SLURM_PARTITION" -t idle -o '%D' 2>/dev/null | awk '{ n += $1 } END { print n + 0 }'; }
# IDLE_SEEN: how many were idle when the wait passed. The job asks for that many, not for a
# recount: a worker's own PMIx check step (step 50) can hold its node for a second right
# then, and a recount sent the gate out on fewer nodes (seen: a one-node gate whose
# two-task PMIx step could not fit). Asked for, a briefly busy node only delays the start.
IDLE_SEEN=0
enough_idle() { IDLE_SEEN=$(idle_nodes); ((IDLE_SEEN >= GPU_CLUSTER_NODES)); }
# not_idle: "<node> <state> (<reason>) [jobs: <id> <name> <user> <time>, ...]" for each node of
# the partition that is not idle, so a timed-out wait names what held it (a drained worker, a
# node down, one never registered, a job that kept a node allocated).
not_idle() {
  local node state reason line jobs listed=""
  while IFS='|' read -r node state reason; do
    [[ $state != idle ]] || continue
    line="$node $state"
    [[ -z $reason || $reason == none ]] || line+=" ($reason)"
    jobs=$(squeue -h -w "$node" -o '%i %j %u %M' 2>/dev/null | paste -sd ',' - | sed 's/,/, /g' || true)
    [[ -z $jobs ]] || line+=" [jobs: $jobs]"
    listed+="${listed:+; }$line"
  done < <(sinfo -h -N -p "$SLURM_PARTITION" -o '%N|%T|%E' 2>/dev/null)
  printf '%s' "${listed:-none listed by sinfo}"
}

main() {
  local job record="$FSX_ROOT/validation/first-boot.jobid"
  load_identity
  if ! is_controller; then log "the controller submits the validation job"; return 0; fi
  # Nodes that register after this point join a running cluster (lib/join-gate.sh).
  if [[ $VALIDATION_ENABLED != 1 ]]; then join_gate_open; skip "first-boot validation (disabled in the stack config)"; return 0; fi
  if [[ ! -f $VALIDATION_JOB ]]; then join_gate_open; skip "first-boot validation ($VALIDATION_JOB is not shipped)"; return 0; fi
  if [[ -s $record ]]; then
    join_gate_open
    cp "$record" "$GPU_CLUSTER_STATE/validation-job"
    log "validation job $(<"$record") already submitted for this cluster"
    return 0
  fi
  local wait=$((VALIDATION_WAIT_MINUTES * 60)) what="$GPU_CLUSTER_NODES idle node(s) in partition $SLURM_PARTITION (sinfo)"
  wait_until "$wait" "$what" enough_idle ||
    die "timed out after ${wait}s waiting for $what: $IDLE_SEEN idle; not idle: $(not_idle)"
  install -d -m 0700 "$FSX_ROOT/validation"
  # Opened before the count: a node that registers later is drained and gated on its
  # own instead of missing both gates.
  join_gate_open
  # Every idle node in topology.conf first: Slurm refuses a job that needs more nodes than
  # its switches reach (lib/topology.sh); the agent loop may not have refreshed yet.
  topology_current
  # Same submission as `gpu-cluster-validation run`: the job spans the nodes idle at the wait.
  job=$(cd "$FSX_ROOT/validation" && sbatch --parsable -N "$IDLE_SEEN" "$VALIDATION_JOB") ||
    die "sbatch $VALIDATION_JOB failed"
  job=${job%%;*}
  printf '%s\n' "$job" | atomic_write "$record" 0600
  cp "$record" "$GPU_CLUSTER_STATE/validation-job"
  log "submitted first-boot validation job $job ($VALIDATION_JOB)"
}

main "$@"
