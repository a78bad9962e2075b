# shellcheck shell=bash
# The repair agent's turn in the controller's agent loop (lib/munge-responder.sh).
# Sourced, never run. The agent itself is nodeside/repair.py (docs/health.md, "Automatic
# repair"): it acts on nodes drained for hardware by repair.policy (REPAIR_POLICY), within
# the limits in cluster.env, and records every action under FSX_ROOT/repair/.
# It runs with the node's own boto3 (GPU_CLUSTER_AWS_PYTHON, installed by step 20), since
# a replacement is an Auto Scaling call; with policy `none` it does not run at all.
# Prerequisites: common.sh (log, warn), identity.env loaded (NODE_NAME: the agent never
# replaces the controller it runs on), Slurm clients talking to slurmctld.

REPAIR_LAST=-86400
REPAIR_PYTHON_SAID=""

# repair_tick: at most every REPAIR_INTERVAL s (default 60), one bounded pass; its lines
# go to the agent loop's log. REPAIR_NOW (tests) hands the agent its clock.
repair_tick() {
  local line py
  [[ ${REPAIR_POLICY:-none} != none ]] || return 0
  ((SECONDS - REPAIR_LAST >= ${REPAIR_INTERVAL:-60})) || return 0
  REPAIR_LAST=$SECONDS
  # Without the boto3 interpreter (step 20 did not install it) it runs with python3, said
  # once: policy isolate needs no AWS call, and a replacement fails with the reason.
  py=${GPU_CLUSTER_AWS_PYTHON:-}
  if [[ ! -x $py ]]; then
    [[ -n $REPAIR_PYTHON_SAID ]] || warn "repair: ${py:-GPU_CLUSTER_AWS_PYTHON} is not installed (step 20); the agent runs with python3 and cannot call AWS"
    REPAIR_PYTHON_SAID=1
    py=python3
  fi
  while IFS= read -r line; do log "$line"; done < <(
    NODE_NAME=${NODE_NAME:-} timeout "${REPAIR_TIMEOUT:-150}" "$py" "$REPAIR_PROGRAM" tick \
      ${REPAIR_NOW:+--now "$REPAIR_NOW"} 2>&1 || echo "repair: the agent's pass ended with exit $?"
  )
}
