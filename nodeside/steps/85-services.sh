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
  local s services=(munge gpu-cluster-munge-responder)
  load_identity
  if runs_slurmd; then services+=(slurmd); fi
  if is_controller; then services+=(slurmctld); fi
  if is_controller && [[ ${ACCOUNTING_ENABLED:-0} == 1 ]]; then services+=(slurmdbd); fi
  svc enable "${services[@]}"
  for s in "${services[@]}"; do
    svc active "$s" || die "$s is not running"
  done
  # Debian's and Ubuntu's slurmctld package enables its unit at install: on a worker it
  # would start at the next boot and fail (not the SlurmctldHost), leaving systemd degraded.
  if ! is_controller && [[ $GPU_CLUSTER_SERVICE_MANAGER == systemd ]] &&
    svc_enabled slurmctld; then
    svc_disable slurmctld
    log "disabled slurmctld (enabled by its package; this node is a worker)"
  fi
  # Likewise slurmd on a dedicated controller or a login node: started at boot it would
  # register the node and take jobs.
  if ! runs_slurmd && [[ $GPU_CLUSTER_SERVICE_MANAGER == systemd ]] &&
    svc_enabled slurmd; then
    svc_disable slurmd
    log "disabled slurmd (enabled by its package; this node ($NODE_ROLE) takes no jobs)"
  fi
  log "running and enabled: ${services[*]}"
}

main "$@"
