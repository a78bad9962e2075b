#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 90: the users' starting point. Writes the job templates rendered for this
# instance type to /fsx/jobs (controller only; every node shares /fsx). A template a
# user has edited is kept (the pristine copy in FSX_ROOT/jobs tells): the new version
# lands next to it as <name>.new.
# Prerequisites: step 30 (/fsx).
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"

main() {
  local src dest pristine jobs="$FSX_MOUNTPOINT/jobs"
  load_identity
  if ! is_controller; then
    log "job templates are written by the controller"
    return 0
  fi
  install -d -m 0755 "$jobs" "$jobs/logs"
  install -d -m 0700 "$FSX_ROOT/jobs"
  chmod 1777 "$jobs/logs"
  for src in "$GPU_CLUSTER_HOME"/templates/jobs/*; do
    dest="$jobs/${src##*/}"
    pristine="$FSX_ROOT/jobs/${src##*/}"
    if [[ ! -e $dest ]] || cmp -s "$dest" "$pristine"; then
      cmp -s "$src" "$dest" || log "wrote $dest"
      install -m 0644 "$src" "$dest"
      install -m 0644 "$src" "$pristine"
    elif ! cmp -s "$src" "$dest"; then
      install -m 0644 "$src" "$dest.new"
      log "kept edited $dest; new version in $dest.new"
    fi
  done
}

main "$@"
