# shellcheck shell=bash
# Step 50's PMIx run check, sourced (never run): a real two-task PMIx step on this node
# (lib/check-pmix.sh: `srun --mpi=list` would only list plugin files).
# The step needs the node's CPUs within --immediate, so it runs only on a node that is
# free: a drained node takes no job step, and a node that already runs (or is still
# completing) jobs cannot start it. That is the normal state of every worker when step 50
# runs again to follow a replaced controller (lib/munge-responder.sh): its jobs carry on
# under the new slurmctld. Failing the step there would retry it for minutes while the
# boot lock keeps the node from following, then mark it failed (and the controller would
# drain it, lib/boot-failures.sh) for running jobs. Skipped nodes are left to the
# validation gate, which runs the same step inside its allocation.
# With a topology (slurm.topology: tree) Slurm refuses any job that needs a node no switch
# reaches ("Requested node configuration is not available"), and a node that just
# registered is under no switch until the controller's agent refreshes topology.conf
# (lib/topology.sh, within its tick): the check waits for that, bounded by
# PMIX_TOPOLOGY_WAIT, and leaves the check to the gate when the refresh is later still.
# The check is a job of its own (srun outside any allocation), named PMIX_CHECK_JOB and
# limited to PMIX_CHECK_MINUTES: a job srun leaves behind (srun killed by the check's
# timeout after its allocation was granted; a completion message slurmctld never got,
# which srun does not retry) holds the node ALLOCATED until its time limit, the
# partition's DefaultTime (60 min) without one, and InactiveLimit=0 never ends it: the
# controller's hand-off then waits for this node to be idle until it gives up. After
# srun returns, a job of that name still on this node is cancelled and said.
# Prerequisites: common.sh; topology.sh (topology_enabled); Slurm clients (scontrol, srun,
# squeue, scancel) talking to this cluster's slurmctld.
PMIX_CHECK_JOB=gpu-cluster-pmix-check
PMIX_CHECK_MINUTES=2

# pmix_busy_state STATE: STATE (scontrol's State=, e.g. MIXED+DRAIN) says the node holds jobs.
pmix_busy_state() {
  [[ $1 =~ (^|\+)(ALLOCATED|MIXED|COMPLETING)(\+|$) ]]
}

# pmix_placed: this node is under a switch, or the topology has no switch at all (Slurm
# then places jobs as if none were loaded). `scontrol show topology NODE` prints the
# switches above NODE (nothing, and an error line, when there is none).
pmix_placed() {
  local out
  out=$(scontrol show topology 2>/dev/null) || return 1
  grep -q 'SwitchName=' <<<"$out" || return 0
  scontrol show topology "$NODE_NAME" 2>/dev/null | grep -q 'SwitchName='
}

# pmix_leftover: cancel the check's job if srun left it on this node, and say so.
pmix_leftover() {
  local jobs
  # Not COMPLETING: srun returns once slurmctld took the completion, so a job it ended
  # may still be listed as completing; that one frees the node by itself.
  jobs=$(squeue -h -n "$PMIX_CHECK_JOB" -w "$NODE_NAME" -t pending,running,configuring,suspended -o '%i %T' 2>/dev/null |
    paste -sd ',' - || true)
  [[ -n $jobs ]] || return 0
  warn "srun left the PMIx check's job on $NODE_NAME ($jobs); cancelling it: it holds the node until its time limit"
  scancel -n "$PMIX_CHECK_JOB" -w "$NODE_NAME" 2>/dev/null || warn "scancel -n $PMIX_CHECK_JOB -w $NODE_NAME failed"
}

pmix_check() {
  local said state
  state=$(scontrol show node "$NODE_NAME" | grep -o 'State=[^ ]*' | head -n 1 | cut -d= -f2)
  if [[ $state == *DRAIN* ]]; then
    skip "PMIx run check ($NODE_NAME is drained; the validation gate runs it)"
    return 0
  fi
  if pmix_busy_state "$state"; then
    skip "PMIx run check ($NODE_NAME runs jobs, State=$state: no room for the check's step; the validation gate runs it)"
    return 0
  fi
  if topology_enabled && ! wait_until "${PMIX_TOPOLOGY_WAIT:-240}" "$NODE_NAME under a switch in Slurm's topology (the controller's agent refreshes it)" pmix_placed; then
    skip "PMIx run check ($NODE_NAME is under no switch in Slurm's topology after ${PMIX_TOPOLOGY_WAIT:-240}s, so Slurm refuses a job on it; the validation gate runs it once the controller places the node)"
    return 0
  fi
  said=$("$GPU_CLUSTER_HOME/lib/check-pmix.sh" -N1 -w "$NODE_NAME" --immediate=60 \
    --job-name="$PMIX_CHECK_JOB" --time="$PMIX_CHECK_MINUTES") && {
    pmix_leftover
    log "PMIx: a two-task srun --mpi=pmix step ran on $NODE_NAME"
    return 0
  }
  pmix_leftover
  # The node was free when asked, but registering made it idle, and the controller's
  # step 95 submits the validation gate across every idle node at that moment: the gate
  # can take this node while the check waits for it (--immediate runs out with the gate
  # still running). A node a job holds, or drained since, is the gate's to check.
  state=$(scontrol show node "$NODE_NAME" | grep -o 'State=[^ ]*' | head -n 1 | cut -d= -f2)
  if [[ $state == *DRAIN* ]] || pmix_busy_state "$state"; then
    skip "PMIx run check ($NODE_NAME was taken while the check waited, State=$state; the validation gate runs it; srun said: $said)"
    return 0
  fi
  if [[ $GPU_CLUSTER_PACKAGES == preinstalled ]]; then skip "PMIx run check ($said)"; return 0; fi
  die "$said"
}
