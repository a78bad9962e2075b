#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 60: Enroot. /etc/enroot/enroot.conf with these keys [ENROOT-CONF]:
# runtime under /run/enroot/user-$(id -u), cache/data/temp on node-local NVMe (images
# are tens of GB and would fill the root volume), ENROOT_RESTRICT_DEV n (EFA's
# /dev/infiniband visible in containers), the squash options, ENROOT_MOUNT_HOME y.
# /run is tmpfs: /etc/tmpfiles.d/enroot.conf recreates /run/enroot after every reboot
# (without it Pyxis jobs fail with "mkdir: cannot create directory '/run/enroot'").
# If /opt/dlami/nvme is absent (no local NVMe, or the local cluster) the directories
# go under ENROOT_FALLBACK_BASE on the root volume, and the step says so.
# Prerequisites: step 20 (enroot).
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"

nvme_ready() { mountpoint -q "$NVME_MOUNT"; }

main() {
  local base="$NVME_MOUNT/enroot" t="$GPU_CLUSTER_HOME/templates"
  load_identity
  # A dedicated controller or a login node (CPU instances, no instance store) runs no
  # jobs: no container runtime to configure, and no NVMe to wait for.
  if ! runs_slurmd; then skip "Enroot runtime ($NODE_ROLE without slurmd: runs no jobs)"; return 0; fi
  if ((NVME_WAIT > 0)) && [[ -d $NVME_MOUNT ]] && ! nvme_ready; then
    # The DLAMI assembles and mounts the instance-store RAID by a unit that may still run.
    wait_until "$NVME_WAIT" "local NVMe to be mounted on $NVME_MOUNT" nvme_ready || true
  fi
  if ! nvme_ready; then
    base=$ENROOT_FALLBACK_BASE
    warn "$NVME_MOUNT is not mounted: Enroot cache, data and temp go to $base on the root volume"
  fi
  install -d -m 1777 "$base" "$base/cache" "$base/data" "$base/tmp"
  mkdir -p /etc/enroot /etc/tmpfiles.d
  sed "s|@ENROOT_BASE@|$base|g" "$t/enroot.conf" | atomic_write /etc/enroot/enroot.conf 0644
  install -m 0644 "$t/enroot-tmpfiles.conf" /etc/tmpfiles.d/enroot.conf
  if [[ $GPU_CLUSTER_SERVICE_MANAGER == systemd ]]; then
    systemd-tmpfiles --create /etc/tmpfiles.d/enroot.conf
  else
    install -d -m 1777 /run/enroot
  fi
  [[ $(stat -c %a /run/enroot) == 1777 ]] || die "/run/enroot is not mode 1777"
  log "enroot.conf: cache/data/temp under $base; /run/enroot kept by tmpfiles.d"
}

main "$@"
