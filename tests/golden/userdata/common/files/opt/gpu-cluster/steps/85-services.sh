#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 85: services for the next reboot. munge, the munge responder and slurmd on
# every node, slurmctld on the controller: enabled so a rebooted node comes back
# (/fsx from fstab, /run/enroot from tmpfiles.d, slurmd with its -Z --conf line from
# /etc/default/slurmd through the unit drop-in), and checked running now.
# Prerequisites: steps 40 and 50.
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"

main() {
  local s services=(munge gpu-cluster-munge-responder slurmd)
  load_identity
  if is_controller; then services+=(slurmctld); fi
  for s in "${services[@]}"; do
    svc enable "$s"
    svc active "$s" || die "$s is not running"
  done
  log "running and enabled: ${services[*]}"
}

main "$@"
