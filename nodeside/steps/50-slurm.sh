#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 50: Slurm. The controller publishes its name and IPv4 (FSX_ROOT/controller.env);
# workers wait (bounded) for it. slurm.conf is filled from the template
# (@CONTROLLER_HOST@, @CONTROLLER_ADDR@, @MAX_NODES@ from the GpuClusterNodes tag);
# slurmd -C must agree with the configured node (check-slurmd-c.sh prints both lines);
# the controller starts slurmctld; every node starts a dynamic slurmd
# (`slurmd -Z --conf "NodeAddr=<this IPv4> ..."`, no slurm.conf edit for a replacement)
# and the step waits until slurmctld lists this node at that address, then runs a real
# two-task PMIx step on it when it is free (lib/node-pmix.sh). When a replaced
# controller publishes a new address, the munge responder re-runs this step on workers.
# Prerequisites: steps 10, 20, 30, 40 (munge Success).
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"
# shellcheck source=lib/boot-failures.sh
. "$GPU_CLUSTER_HOME/lib/boot-failures.sh"
# shellcheck source=lib/block-end.sh
. "$GPU_CLUSTER_HOME/lib/block-end.sh"
# shellcheck source=lib/join-gate.sh
. "$GPU_CLUSTER_HOME/lib/join-gate.sh"
# shellcheck source=lib/topology.sh
. "$GPU_CLUSTER_HOME/lib/topology.sh"
# shellcheck source=lib/accounting.sh
. "$GPU_CLUSTER_HOME/lib/accounting.sh"
# shellcheck source=lib/node-pmix.sh
. "$GPU_CLUSTER_HOME/lib/node-pmix.sh"

shopt -s lastpipe # install_if_changed runs at the end of pipes and sets CHANGED
CHANGED=0
# install_if_changed PATH MODE: stdin -> PATH unless identical; remembers a change.
install_if_changed() {
  local tmp
  tmp=$(mktemp)
  cat >"$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; return 0; fi
  mkdir -p "${1%/*}"
  chmod "$2" "$tmp"
  mv -f "$tmp" "$1"
  CHANGED=1
  log "wrote $1"
}

# ctld_up: slurmctld answers. Keeps what Slurm last said for the timeout message, and
# stops early when slurmctld keeps taking connections but dropping them unanswered
# ("Zero Bytes were transmitted or received"): it does that to requests whose munge
# credential it cannot decode, i.e. munged here runs another key than the controller.
DROPPED=0
PING_SAID=""
ctld_up() {
  local out
  out=$(scontrol ping 2>&1) && grep -q 'is UP' <<<"$out" && return 0
  PING_SAID=$(sinfo -h -o %P 2>&1 | tail -n 1) || true
  if grep -q 'Zero Bytes were transmitted or received' <<<"$PING_SAID"; then DROPPED=$((DROPPED + 1)); else DROPPED=0; fi
  ((DROPPED < 6)) ||
    die "slurmctld on $CONTROLLER_HOST drops this node's requests ($PING_SAID): most likely munged here runs another key than the controller's (see slurmctld.log for 'authentication error')"
  return 1
}
wait_ctld() {
  wait_until "$1" "$2" ctld_up || die "timed out after ${1}s waiting for $2; Slurm last said: ${PING_SAID:-nothing}"
}
# registered: slurmctld lists this node at its IPv4, responding, and (when slurmd was
# just started) registered by that new slurmd, not remembered from before.
STARTED_AT=0
registered() {
  local info since
  info=$(scontrol show node "$NODE_NAME" 2>/dev/null) || return 1
  grep -q "NodeAddr=$NODE_ADDR " <<<"$info" || return 1
  ! grep -Eq 'State=[^ ]*(NOT_RESPONDING|DOWN|INVALID)' <<<"$info" || return 1
  since=$(grep -o 'SlurmdStartTime=[^ ]*' <<<"$info" | cut -d= -f2)
  [[ $since =~ ^[0-9]{4}- ]] && (($(date -d "$since" +%s) >= STARTED_AT - 2))
}

publish_controller() {
  printf "CONTROLLER_HOST='%s'\nCONTROLLER_ADDR='%s'\n" "$NODE_NAME" "$NODE_ADDR" |
    atomic_write "$FSX_ROOT/controller.env" 0600
  log "published $FSX_ROOT/controller.env ($NODE_NAME, $NODE_ADDR)"
}

# A dedicated controller (CONTROLLER_DEDICATED=1): slurmctld only. Its hardware is not the
# GPU node line (so no slurmd -C check) and it registers no node, so it takes no jobs
# and the hand-off's node count (step 95) is the GPU nodes alone.
dedicated_controller() {
  svc_reload
  accounting_start
  if svc_older_than slurmctld /etc/slurm/slurm.conf; then CHANGED=1; fi
  if ((CHANGED)); then svc restart slurmctld; else svc start slurmctld; fi
  wait_ctld 120 "slurmctld on this node to answer (scontrol ping)"
  if svc active slurmd; then svc stop slurmd; fi
  skip "slurmd (dedicated controller: runs slurmctld only, takes no jobs)"
  mv -f "$GPU_CLUSTER_STATE/controller.env.using" "$GPU_CLUSTER_STATE/controller.env"
  log "$NODE_NAME runs slurmctld at $NODE_ADDR (dedicated controller)"
}

# A login node (role login): the Slurm client with this cluster's slurm.conf, munge, no
# slurmd (it takes no jobs) and no slurmctld; people submit from here.
login_node() {
  wait_ctld "$CONTROLLER_WAIT" "slurmctld on $CONTROLLER_HOST ($CONTROLLER_ADDR) to answer (scontrol ping)"
  if svc active slurmd; then svc stop slurmd; fi
  skip "slurmd (login node: takes no jobs)"
  mv -f "$GPU_CLUSTER_STATE/controller.env.using" "$GPU_CLUSTER_STATE/controller.env"
  log "$NODE_NAME is a login node of $CONTROLLER_HOST (sbatch, srun, squeue, sacct)"
}

main() {
  local max line state changed
  load_identity
  block_end_publish # FSX_ROOT/blocks/<block>.end: the controller reserves the block's end
  if is_controller; then publish_controller; else
    wait_for "$CONTROLLER_WAIT" "the controller to publish $FSX_ROOT/controller.env" test -s "$FSX_ROOT/controller.env"
  fi
  # Use (and later record) one copy: the published file may change meanwhile.
  cp "$FSX_ROOT/controller.env" "$GPU_CLUSTER_STATE/controller.env.using"
  # shellcheck source=/dev/null
  . "$GPU_CLUSTER_STATE/controller.env.using"
  max=$(max_node_count "$GPU_CLUSTER_NODES")
  sed -e "s|@CONTROLLER_HOST@|$CONTROLLER_HOST|g" -e "s|@CONTROLLER_ADDR@|$CONTROLLER_ADDR|g" \
    -e "s|@MAX_NODES@|$max|g" "$SLURM_CONF_TEMPLATE" | install_if_changed /etc/slurm/slurm.conf 0644
  # The dynamic node line (NodeAddr=<this IPv4> ...) the slurmd unit passes to -Z --conf;
  # a node joining a running cluster registers drained until the join gate passes it.
  state=$(join_state_arg)
  sed -e "s|@NODE_ADDR@|$NODE_ADDR|g" -e "s|@NODE_BLOCK@|$NODE_BLOCK|g" \
    -e "s|^\(SLURMD_NODE_CONF=\".*\)\"\$|\1$state\"|" "$SLURMD_DEFAULT_TEMPLATE" |
    install_if_changed /etc/default/slurmd 0644
  # TopologyPlugin=topology/tree: slurmctld and slurmd stop at start without topology.conf
  # (the controller's latest, or no switch at all until its first refresh: lib/topology.sh).
  # A newer copy alone restarts nothing: the controller's `scontrol reconfigure` re-reads it.
  if topology_enabled; then
    changed=$CHANGED
    topology_install | install_if_changed "$TOPOLOGY_CONF" 0644
    CHANGED=$changed
  fi
  if grep -q '@[A-Z_]*@' /etc/slurm/slurm.conf /etc/default/slurmd; then
    die "unfilled placeholder left in /etc/slurm/slurm.conf or /etc/default/slurmd"
  fi
  mkdir -p /var/spool/slurmd /var/log/slurm "$FSX_ROOT/slurmctld"
  if is_login; then
    login_node
    return 0
  fi
  if ! runs_slurmd; then
    dedicated_controller
    return 0
  fi
  "$GPU_CLUSTER_HOME/lib/check-slurmd-c.sh" || die "slurmd -C disagrees with the configured node (both lines above)"
  svc_reload
  # A daemon that started before its config was last written runs with the old one
  # (an earlier attempt wrote the file, then failed): restart it as if it had changed.
  if svc_older_than slurmd /etc/slurm/slurm.conf /etc/default/slurmd ||
    { is_controller && svc_older_than slurmctld /etc/slurm/slurm.conf; }; then CHANGED=1; fi
  if is_controller; then
    accounting_start
    if ((CHANGED)); then svc restart slurmctld; else svc start slurmctld; fi
    wait_ctld 120 "slurmctld on this node to answer (scontrol ping)"
  else
    wait_ctld "$CONTROLLER_WAIT" "slurmctld on $CONTROLLER_HOST ($CONTROLLER_ADDR) to answer (scontrol ping)"
  fi
  # An earlier failed boot of this node may be drained or listed down by the controller
  # (lib/boot-failures.sh); this attempt gets past it, so undo that first.
  clear_boot_failure "$NODE_NAME" | while IFS= read -r line; do log "$line"; CHANGED=1; done
  # A running slurmd that slurmctld lost (e.g. after a munge key fix) re-registers at once
  # when restarted, instead of at slurmctld's next ping (SlurmdTimeout / 3).
  if scontrol show node "$NODE_NAME" 2>/dev/null | grep -Eq 'State=[^ ]*(NOT_RESPONDING|DOWN)'; then CHANGED=1; fi
  if ((CHANGED)) || ! svc active slurmd; then STARTED_AT=$(date +%s); fi
  if ((CHANGED)); then svc restart slurmd; else svc start slurmd; fi
  wait_for 300 "slurmctld to register $NODE_NAME at NodeAddr=$NODE_ADDR (scontrol show node)" registered
  if [[ -n $state ]] && scontrol show node "$NODE_NAME" | grep -q 'State=[^ ]*DRAIN'; then
    log "$NODE_NAME joined a running cluster: drained until the controller's join gate passes it (lib/join-gate.sh)"
  elif scontrol show node "$NODE_NAME" | grep -q 'State=[^ ]*DRAIN'; then
    warn "$NODE_NAME is drained: $(scontrol show node "$NODE_NAME" | grep -o 'Reason=.*')"
  fi
  pmix_check
  # The munge responder re-runs this step on workers when the published one changes.
  mv -f "$GPU_CLUSTER_STATE/controller.env.using" "$GPU_CLUSTER_STATE/controller.env"
  log "$NODE_NAME registered with $CONTROLLER_HOST at $NODE_ADDR"
}

main "$@"
