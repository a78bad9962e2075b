# shellcheck shell=bash
# The cluster metrics' turn in the controller's agent loop (lib/munge-responder.sh).
# Sourced, never run. With `logs` (LOGS_ENABLED=1) the controller publishes node and job
# counts and the gate's verdict every METRICS_INTERVAL s (nodeside/cluster_metrics.py,
# docs/logs.md) with the node's own boto3 (GPU_CLUSTER_AWS_PYTHON, step 20). A failure is
# logged when it starts and when it changes, not every minute; recovery is logged once.
# CLOUDWATCH_SKIP (the local lanes: no CloudWatch) logs the reason once and publishes nothing.
# Prerequisites: common.sh (log, warn), cluster.env (FSX_ROOT, METRICS_NAMESPACE), Slurm
# clients talking to slurmctld.

METRICS_LAST=-86400
METRICS_SAID=""
METRICS_SKIP_SAID=""

# metrics_tick: at most every METRICS_INTERVAL s, one bounded run.
metrics_tick() {
  local out rc=0 py=${GPU_CLUSTER_AWS_PYTHON:-}
  [[ ${LOGS_ENABLED:-0} == 1 ]] || return 0
  ((SECONDS - METRICS_LAST >= ${METRICS_INTERVAL:-60})) || return 0
  METRICS_LAST=$SECONDS
  if [[ -n ${CLOUDWATCH_SKIP:-} ]]; then
    [[ -n $METRICS_SKIP_SAID ]] || log "metrics: not published to CloudWatch ($CLOUDWATCH_SKIP)"
    METRICS_SKIP_SAID=1
    return 0
  fi
  if [[ ! -x $py ]]; then
    metrics_say "metrics: ${py:-GPU_CLUSTER_AWS_PYTHON} is not installed (step 20): not published"
    return 0
  fi
  out=$(timeout "${METRICS_TIMEOUT:-50}" "$py" "$CLUSTER_METRICS_PROGRAM" publish 2>&1) || rc=$?
  if ((rc == 0)); then
    [[ -z $METRICS_SAID ]] || log "metrics: published to $METRICS_NAMESPACE again"
    METRICS_SAID=""
  else
    metrics_say "${out:-metrics: the program ended with exit $rc}"
  fi
}

# metrics_say LINE: log LINE unless it is what was said last.
metrics_say() {
  [[ $1 == "$METRICS_SAID" ]] && return 0
  METRICS_SAID=$1
  warn "$1"
}
