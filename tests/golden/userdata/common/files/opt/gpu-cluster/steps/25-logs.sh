#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 25: logs that outlive the node (docs/logs.md). With `logs` (LOGS_ENABLED=1) the
# CloudWatch agent that step 20 installed ships this node's boot log, cloud-init's
# output and slurmd's log (and the hook's, with one) to the cluster's log group
# LOG_GROUP as streams `<node>/<instance id>/<log>`; the controller also ships
# slurmctld's and slurmdbd's logs and the validation reports (its append-config). The
# configuration is rendered by the program (userdata/cloudwatch_agent.py, checked
# against the agent's own schema); this step fills in the node's name and instance id,
# loads it and (re)starts the agent, which then also starts at every boot. It runs
# right after step 20, so the boot log of any later failure is in CloudWatch when the
# instance is gone. Rerunning converges (the agent restarts with the same files).
# CLOUDWATCH_SKIP=<reason> (the local lanes: no CloudWatch) skips it, saying why.
# Prerequisites: steps 10 (identity), 20 (the agent).
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"

: "${CLOUDWATCH_AGENT_ETC:=/opt/aws/amazon-cloudwatch-agent/etc/gpu-cluster}"
: "${CLOUDWATCH_AGENT_CTL:=/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl}" # cluster.env

# fill TEMPLATE DEST: the rendered configuration with this node's name and instance id.
fill() {
  sed -e "s|@NODE_NAME@|$NODE_NAME|g" -e "s|@INSTANCE_ID@|$INSTANCE_ID|g" "$1" | atomic_write "$2" 0644
  if grep -q '@[A-Z_]*@' "$2"; then die "unfilled placeholder left in $2"; fi
}

ctl() {
  local out
  out=$("$CLOUDWATCH_AGENT_CTL" "$@" 2>&1) || die "amazon-cloudwatch-agent-ctl $* failed with status $?: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
  printf '%s\n' "$out"
}

main() {
  load_identity
  if [[ ${LOGS_ENABLED:-0} != 1 ]]; then
    skip "CloudWatch logs (logs.enabled is false: this node's logs stay on its disk)"
    return 0
  fi
  if [[ -n ${CLOUDWATCH_SKIP:-} ]]; then
    skip "CloudWatch logs ($CLOUDWATCH_SKIP)"
    return 0
  fi
  [[ -x $CLOUDWATCH_AGENT_CTL ]] || die "$CLOUDWATCH_AGENT_CTL not found: step 20 installs the CloudWatch agent"
  mkdir -p "$CLOUDWATCH_AGENT_ETC"
  fill "$CLOUDWATCH_AGENT_NODE_CONFIG" "$CLOUDWATCH_AGENT_ETC/node.json"
  # -m ec2: credentials from the instance profile, region from instance metadata.
  if is_controller; then
    fill "$CLOUDWATCH_AGENT_CONTROLLER_CONFIG" "$CLOUDWATCH_AGENT_ETC/controller.json"
    ctl -a fetch-config -m ec2 -c "file:$CLOUDWATCH_AGENT_ETC/node.json" >/dev/null
    ctl -a append-config -m ec2 -c "file:$CLOUDWATCH_AGENT_ETC/controller.json" -s >/dev/null
  else
    ctl -a fetch-config -m ec2 -c "file:$CLOUDWATCH_AGENT_ETC/node.json" -s >/dev/null
  fi
  grep -q '"status": *"running"' <<<"$(ctl -a status)" ||
    die "the CloudWatch agent is not running after its start (amazon-cloudwatch-agent-ctl -a status; its log: /opt/aws/amazon-cloudwatch-agent/logs/amazon-cloudwatch-agent.log)"
  log "CloudWatch agent running: this node's logs go to $LOG_GROUP as $NODE_NAME/$INSTANCE_ID/<log>"
}

main "$@"
