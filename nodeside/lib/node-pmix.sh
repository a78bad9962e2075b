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
# Prerequisites: common.sh; Slurm clients (scontrol, srun) talking to this cluster's slurmctld.

# pmix_busy_state STATE: STATE (scontrol's State=, e.g. MIXED+DRAIN) says the node holds jobs.
pmix_busy_state() {
  [[ $1 =~ (^|\+)(ALLOCATED|MIXED|COMPLETING)(\+|$) ]]
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
  said=$("$GPU_CLUSTER_HOME/lib/check-pmix.sh" -N1 -w "$NODE_NAME" --immediate=60) && {
    log "PMIx: a two-task srun --mpi=pmix step ran on $NODE_NAME"
    return 0
  }
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
