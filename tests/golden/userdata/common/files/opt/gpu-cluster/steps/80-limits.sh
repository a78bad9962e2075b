#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 80: limits the fabric needs. RDMA memlock: EFA pins its buffers and fails with
# "ibv_reg_mr failed, got error (12)" under a low memlock [SLURM-MEMLOCK]. The
# user data ships /etc/security/limits.d (logins, so sbatch/srun start from a high
# limit) and systemd drop-ins (slurmd's limit is what job steps inherit, as slurm.conf
# does not propagate MEMLOCK). RemoveIPC=no keeps NCCL's /dev/shm segments when a
# user's last session ends [LOGIND]. This step checks they are in effect.
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

# can_raise_limits: CAP_SYS_RESOURCE is in PID 1's bounding set. An EC2 instance's systemd
# always has it; a container host may withhold it, and then no unit can go above the
# hard limit the host gave the node, whatever its drop-in says.
can_raise_limits() {
  local bnd
  bnd=$(awk '/^CapBnd:/ { print $2 }' /proc/1/status)
  (((16#$bnd >> 24) & 1))
}

remove_ipc() { busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager RemoveIPC; }

main() {
  local got
  load_identity
  # memlock and RemoveIPC are for jobs (EFA buffers, MPI shared memory) under slurmd.
  if ! runs_slurmd; then skip "job limits ($NODE_ROLE without slurmd: runs no jobs)"; return 0; fi
  grep -Eq '^\*[[:space:]]+hard[[:space:]]+memlock[[:space:]]+unlimited' "$LIMITS_FILE" ||
    die "$LIMITS_FILE does not set the hard memlock limit to unlimited"
  got=$(slurmd_memlock)
  if [[ $got != unlimited ]]; then
    if [[ $GPU_CLUSTER_SERVICE_MANAGER == systemd ]] && can_raise_limits; then
      die "slurmd runs with a memlock limit of $got, not unlimited (check the slurmd drop-in LimitMEMLOCK)"
    fi
    warn "slurmd runs with a memlock limit of $got (this node cannot raise it: no CAP_SYS_RESOURCE, or direct mode); EFA jobs would need unlimited"
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
