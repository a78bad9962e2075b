#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 30: /fsx. Mounts the FSx for Lustre file system (`<dns>@tcp:/<mountname>`,
# relatime,flock) with bounded retries, keeps one fstab line (_netdev) so it comes
# back after a reboot, and creates the cluster's private directory FSX_ROOT (0700
# root). A no-op mount when /fsx is already a mount point with FSX_ROOT writable (a
# reboot, or the local cluster's shared directory).
# Prerequisites: step 20 (Lustre client); security groups open TCP 988/1018-1023.
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"

fstab_line() {
  local src="$FSX_DNS_NAME@tcp:/$FSX_MOUNT_NAME" line
  line="$src $FSX_MOUNTPOINT lustre defaults,relatime,flock,_netdev 0 0"
  if ! grep -qxF "$line" /etc/fstab; then
    { awk -v m="$FSX_MOUNTPOINT" '$2 != m' /etc/fstab; printf '%s\n' "$line"; } >/etc/fstab.gpu-cluster
    cat /etc/fstab.gpu-cluster >/etc/fstab
    rm -f /etc/fstab.gpu-cluster
    log "fstab: $line"
  fi
}

mount_fsx() {
  local try src="$FSX_DNS_NAME@tcp:/$FSX_MOUNT_NAME"
  mkdir -p "$FSX_MOUNTPOINT"
  for ((try = 1; try <= FSX_MOUNT_TRIES; try++)); do
    # After a reboot systemd may mount the fstab entry while this loop runs.
    if mountpoint -q "$FSX_MOUNTPOINT"; then
      log "$FSX_MOUNTPOINT is mounted (try $try)"
      return 0
    fi
    if mount -t lustre -o relatime,flock "$src" "$FSX_MOUNTPOINT"; then
      log "mounted $src on $FSX_MOUNTPOINT (try $try)"
      return 0
    fi
    log "mount of $src failed (try $try of $FSX_MOUNT_TRIES); retrying in 15s"
    sleep 15
  done
  die "could not mount $src on $FSX_MOUNTPOINT after $FSX_MOUNT_TRIES tries: check the FSx security group (TCP 988, 1018-1023), the DNS name and the Lustre client"
}

main() {
  if fsx_root_ready; then
    log "$FSX_MOUNTPOINT already mounted and $FSX_ROOT writable: nothing to mount"
  else
    if mountpoint -q "$FSX_MOUNTPOINT"; then
      log "$FSX_MOUNTPOINT is mounted; creating $FSX_ROOT"
    elif [[ $GPU_CLUSTER_PACKAGES == preinstalled ]] && ! modinfo lustre >/dev/null 2>&1; then
      die "$FSX_MOUNTPOINT is not a mount point and there is no Lustre client: mount the shared directory on $FSX_MOUNTPOINT first"
    else
      fstab_line
      mount_fsx
    fi
  fi
  install -d -m 0755 "$FSX_MOUNTPOINT/.gpu-cluster" "$FSX_MOUNTPOINT/jobs"
  install -d -m 0700 "$FSX_ROOT"
  # Container images imported once per cluster (bin/gpu-cluster-image): any user's job
  # may import one; sticky, so nobody removes another's.
  install -d -m 1777 "$FSX_MOUNTPOINT/images"
  install -d -m 0700 "$FSX_ROOT"/{munge,munge/requests,munge/responses,slurmctld,status,validation}
  [[ -w $FSX_ROOT ]] || die "$FSX_ROOT is not writable"
  log "$FSX_ROOT ready"
}

main "$@"
