#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 99: the stack's own hook (hooks.on_node_ready), shipped only when the stack sets
# one. Runs last, when every earlier step has passed: munge works, slurmd is registered
# (step 50), Pyxis, limits and services are in place, and on the controller the
# first-boot validation job is submitted. Slurm may already run jobs on this node.
# The hook runs on every boot like every step (so it must converge), as root, with a
# clean environment (the variables below and PATH only), stdin from /dev/null and its
# output appended to its own log (never to the boot's pipe: a daemon the hook leaves
# running would hold that pipe open and stall the boot). `timeout` kills it, and what
# it started in its process group, after ON_NODE_READY_TIMEOUT s [TIMEOUT]. A failure or a
# timeout fails this step like any other: retried, then `failed` in the status marker
# with the reason and the hook's log, and the controller drains the node with it.
# Settings (cluster.env): ON_NODE_READY_SCRIPT, ON_NODE_READY_LOG, ON_NODE_READY_STATUS,
# ON_NODE_READY_MARKERS, ON_NODE_READY_TIMEOUT (s), ON_NODE_READY_RUN_ON.
# Prerequisites: steps 10 (identity) and 50 (controller address); coreutils timeout.
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"

# hook_marker STATE EXIT_STATUS STARTED SECONDS: this node's record of the hook's last
# run, locally and (once /fsx is mounted) on /fsx for operators. Values are ours:
# node names, numbers, times and paths, none needing JSON escapes.
hook_marker() {
  local body
  body=$(printf '{"hook":"on_node_ready","node":"%s","state":"%s","exit_status":%s,"started":"%s","seconds":%s,"timeout_seconds":%s,"log":"%s"}' \
    "$NODE_NAME" "$1" "$2" "$3" "$4" "$ON_NODE_READY_TIMEOUT" "$ON_NODE_READY_LOG")
  install -d -m 0755 "${ON_NODE_READY_STATUS%/*}"
  printf '%s\n' "$body" | atomic_write "$ON_NODE_READY_STATUS" 0644
  if fsx_root_ready; then
    install -d -m 0700 "$ON_NODE_READY_MARKERS"
    printf '%s\n' "$body" | atomic_write "$ON_NODE_READY_MARKERS/$NODE_NAME.json" 0644
  fi
}

main() {
  local rc=0 start started before last secs
  load_identity
  case $ON_NODE_READY_RUN_ON in
    all) ;;
    controller) if ! is_controller; then log "hooks.on_node_ready runs on the controller only"; return 0; fi ;;
    workers) if is_controller; then log "hooks.on_node_ready runs on workers only"; return 0; fi ;;
    *) die "ON_NODE_READY_RUN_ON is '$ON_NODE_READY_RUN_ON'; expected all, controller or workers" ;;
  esac
  [[ -x $ON_NODE_READY_SCRIPT ]] || die "$ON_NODE_READY_SCRIPT is missing or not executable (the payload ships it with mode 0755)"
  [[ -r $GPU_CLUSTER_STATE/controller.env ]] || die "$GPU_CLUSTER_STATE/controller.env missing: run step 50-slurm first"
  # shellcheck source=/dev/null
  . "$GPU_CLUSTER_STATE/controller.env"
  install -d -m 0755 "${ON_NODE_READY_LOG%/*}"
  started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  printf '=== %s: hooks.on_node_ready on %s (%s), timeout %ss\n' "$started" "$NODE_NAME" "$NODE_ROLE" "$ON_NODE_READY_TIMEOUT" >>"$ON_NODE_READY_LOG"
  before=$(stat -c %s "$ON_NODE_READY_LOG")
  hook_marker running null "$started" 0
  log "running hooks.on_node_ready ($ON_NODE_READY_SCRIPT, timeout ${ON_NODE_READY_TIMEOUT}s, output in $ON_NODE_READY_LOG)"
  start=$SECONDS
  env -i PATH="$PATH" HOME=/root LANG=C.UTF-8 \
    CLUSTER_NAME="$CLUSTER_NAME" NODE_NAME="$NODE_NAME" NODE_ROLE="$NODE_ROLE" NODE_ADDR="$NODE_ADDR" \
    INSTANCE_ID="$INSTANCE_ID" INSTANCE_TYPE="$INSTANCE_TYPE" SLURM_PARTITION="$SLURM_PARTITION" \
    CONTROLLER_HOST="$CONTROLLER_HOST" CONTROLLER_ADDR="$CONTROLLER_ADDR" FSX_MOUNTPOINT="$FSX_MOUNTPOINT" \
    timeout --kill-after="${ON_NODE_READY_KILL_AFTER:-30}" "$ON_NODE_READY_TIMEOUT" "$ON_NODE_READY_SCRIPT" \
    </dev/null >>"$ON_NODE_READY_LOG" 2>&1 || rc=$?
  secs=$((SECONDS - start))
  if ((rc == 0)); then
    hook_marker ok 0 "$started" "$secs"
    log "hooks.on_node_ready ok after ${secs}s"
    return 0
  fi
  last=$(tail -c +"$((before + 1))" "$ON_NODE_READY_LOG" | grep -v '^[[:space:]]*$' | tail -n 1 | cut -c1-120) || true
  log "last lines of $ON_NODE_READY_LOG:"
  tail -c +"$((before + 1))" "$ON_NODE_READY_LOG" | tail -n 20
  # 124: timeout's TERM ended it; 137: it ignored TERM and got KILL after the grace [TIMEOUT].
  if ((rc == 124 || (rc == 137 && secs >= ON_NODE_READY_TIMEOUT))); then
    hook_marker timeout "$rc" "$started" "$secs"
    die "hooks.on_node_ready timed out after ${ON_NODE_READY_TIMEOUT}s and was killed (its log: $ON_NODE_READY_LOG)${last:+; last line: $last}"
  fi
  hook_marker failed "$rc" "$started" "$secs"
  die "hooks.on_node_ready exited with status $rc after ${secs}s (its log: $ON_NODE_READY_LOG)${last:+; last line: $last}"
}

main "$@"
