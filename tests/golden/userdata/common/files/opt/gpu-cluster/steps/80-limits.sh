#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 80: limits the fabric needs. RDMA memlock: EFA pins its buffers and fails with
# "ibv_reg_mr failed, got error (12)" under a low memlock (seed 002 section 17). The
# user data ships /etc/security/limits.d (logins, so sbatch/srun start from a high
# limit) and systemd drop-ins (slurmd's limit is what job steps inherit, as slurm.conf
# does not propagate MEMLOCK). RemoveIPC=no keeps NCCL's /dev/shm segments when a
# user's last session ends (seed 002 section 15). This step checks they are in effect.
# Prerequisites: step 50 (slurmd running).
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"

slurmd_memlock() {
  local pid
  if [[ $GPU_CLUSTER_SERVICE_MANAGER == systemd ]]; then
    pid=$(systemctl show -p MainPID --value slurmd)
  else
    pid=$(direct_pid slurmd) || true
  fi
  [[ -n $pid && $pid != 0 ]] || die "slurmd is not running"
  awk '/^Max locked memory/ { print $4 }' "/proc/$pid/limits"
}

remove_ipc() { busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager RemoveIPC; }

main() {
  local got
  grep -Eq '^\*[[:space:]]+hard[[:space:]]+memlock[[:space:]]+unlimited' "$LIMITS_FILE" ||
    die "$LIMITS_FILE does not set the hard memlock limit to unlimited"
  got=$(slurmd_memlock)
  if [[ $got != unlimited ]]; then
    [[ $GPU_CLUSTER_SERVICE_MANAGER == direct ]] || die "slurmd runs with a memlock limit of $got, not unlimited (check the slurmd drop-in LimitMEMLOCK)"
    warn "slurmd runs with a memlock limit of $got (direct mode could not raise it); EFA jobs would need unlimited"
  fi
  grep -q '^RemoveIPC=no' "$LOGIND_DROPIN" || die "$LOGIND_DROPIN does not set RemoveIPC=no"
  if [[ $GPU_CLUSTER_SERVICE_MANAGER == systemd ]]; then
    if [[ $(remove_ipc) != "b false" ]]; then
      log "restarting systemd-logind to apply RemoveIPC=no"
      systemctl restart systemd-logind
      [[ $(remove_ipc) == "b false" ]] || die "systemd-logind still has RemoveIPC enabled"
    fi
  else
    skip "RemoveIPC check of systemd-logind (direct mode)"
  fi
  log "memlock: slurmd $got; RemoveIPC=no"
}

main "$@"
