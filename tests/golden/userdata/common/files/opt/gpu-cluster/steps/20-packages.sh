#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 20: packages. Verifies, or installs exactly: Slurm $SLURM_SERIES from the Ubuntu
# archive (slurm-wlm, slurmd, slurmctld, slurm-client, with the PMIx plugin), munge,
# Enroot $ENROOT_VERSION (NVIDIA release .debs), Pyxis $PYXIS_VERSION (built from its tag
# against libslurm-dev) and the Lustre client module for the RUNNING kernel.
# Installing needs network access (Ubuntu archive, NVIDIA releases on GitHub, the FSx
# client repository) and minutes per boot: bake an AMI by running this same step
# (`gpu-cluster-boot --only packages`) at image build time; a baked node only verifies.
# GPU_CLUSTER_PACKAGES=preinstalled checks that the Slurm and munge binaries exist (any
# version) and reports Enroot, Pyxis and Lustre as skipped (local cluster).
# Prerequisites: Ubuntu 24.04 with apt, curl.
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"

APT=(apt-get -o DPkg::Lock::Timeout=600 -y)
UPDATED=0
apt_update() { ((UPDATED)) || { "${APT[@]}" update; UPDATED=1; }; }
apt_install() { apt_update; DEBIAN_FRONTEND=noninteractive "${APT[@]}" install --no-install-recommends "$@"; }
version_of() { dpkg-query -W -f='${db:Status-Abbrev}${Version}' "$1" 2>/dev/null | sed -n 's/^ii *//p'; }
fetch() { curl -fsSL --retry 5 --retry-delay 3 --connect-timeout 10 --max-time 600 -o "$2" "$1"; }
need_bins() { local b; for b; do command -v "$b" >/dev/null || die "$b not found on PATH"; done; }

slurm() {
  local p v missing=()
  for p in slurm-wlm slurmd slurmctld slurm-client libpmix-dev; do
    v=$(version_of "$p")
    [[ $p == libpmix-dev || $v == "$SLURM_SERIES".* ]] && [[ -n $v ]] || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]} (Slurm $SLURM_SERIES from the Ubuntu archive)"
    apt_install slurm-wlm slurmd slurmctld slurm-client libpmix-dev
  fi
  for p in slurmd slurmctld slurm-client; do
    v=$(version_of "$p")
    [[ $v == "$SLURM_SERIES".* ]] || die "$p is '${v:-not installed}', need Slurm $SLURM_SERIES (Ubuntu 24.04 archive)"
  done
  compgen -G '/usr/lib/*/slurm-wlm/mpi_pmix*.so' >/dev/null || die "Slurm's PMIx plugin (mpi_pmix.so) is missing: srun --mpi=pmix would fail"
  log "Slurm $(version_of slurmd) with PMIx plugin"
}

munge_pkg() {
  [[ -n $(version_of munge) ]] || apt_install munge
  need_bins munged mungekey munge unmunge
  log "munge $(version_of munge)"
}

enroot() {
  local have arch dir
  have=$(command enroot version 2>/dev/null || true)
  if [[ $have != "$ENROOT_VERSION" ]]; then
    arch=$(dpkg --print-architecture)
    dir=$(mktemp -d)
    log "installing Enroot $ENROOT_VERSION (found '${have:-none}')"
    fetch "$ENROOT_URL/v$ENROOT_VERSION/enroot_${ENROOT_VERSION}-1_$arch.deb" "$dir/enroot.deb"
    fetch "$ENROOT_URL/v$ENROOT_VERSION/enroot+caps_${ENROOT_VERSION}-1_$arch.deb" "$dir/enroot-caps.deb"
    apt_install "$dir/enroot.deb" "$dir/enroot-caps.deb"
    rm -rf "$dir"
    have=$(command enroot version)
  fi
  [[ $have == "$ENROOT_VERSION" ]] || die "enroot version is '$have', need $ENROOT_VERSION"
  log "Enroot $have"
}

pyxis() {
  local stamp="$PYXIS_SO.version" dir
  if [[ ! -f $PYXIS_SO || $(cat "$stamp" 2>/dev/null) != "$PYXIS_VERSION" ]]; then
    log "building Pyxis $PYXIS_VERSION against libslurm-dev"
    apt_install libslurm-dev build-essential
    dir=$(mktemp -d)
    fetch "$PYXIS_URL/v$PYXIS_VERSION.tar.gz" "$dir/pyxis.tar.gz"
    tar -xzf "$dir/pyxis.tar.gz" -C "$dir" --strip-components=1
    make -C "$dir" install >/dev/null
    rm -rf "$dir"
    [[ -f $PYXIS_SO ]] || die "Pyxis built but $PYXIS_SO is missing"
    printf '%s\n' "$PYXIS_VERSION" >"$stamp"
  fi
  log "Pyxis $PYXIS_VERSION at $PYXIS_SO"
}

lustre() {
  local kernel pkg codename keyring=/usr/share/keyrings/fsx-ubuntu-public-key.gpg
  kernel=$(uname -r)
  pkg="lustre-client-modules-$kernel"
  if [[ -z $(version_of "$pkg") ]] && ! modinfo lustre >/dev/null 2>&1; then
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    if [[ ! -s $keyring ]]; then
      fetch "$FSX_CLIENT_KEY_URL" - | gpg --dearmor >"$keyring" 2>/dev/null || die "cannot fetch the FSx client repository key"
    fi
    printf 'deb [signed-by=%s] %s %s main\n' "$keyring" "$FSX_CLIENT_REPO" "$codename" >/etc/apt/sources.list.d/fsxlustreclientrepo.list
    UPDATED=0
    apt_update
    # The FSx repository lags Ubuntu kernel updates (FACTS 4.5): fail loudly instead
    # of pulling another kernel that needs a reboot.
    apt-cache policy "$pkg" | grep -q 'Candidate: [0-9]' ||
      die "no $pkg for the running kernel $kernel in the FSx client repository: pin an AMI whose kernel has a Lustre client, or bake the client"
    apt_install "$pkg"
  fi
  modinfo lustre >/dev/null 2>&1 || die "Lustre module not available for kernel $kernel"
  log "Lustre client for $kernel"
}

main() {
  need_bins curl openssl
  if [[ $GPU_CLUSTER_PACKAGES == preinstalled ]]; then
    need_bins slurmd slurmctld srun sinfo scontrol sbatch munged mungekey munge unmunge
    log "preinstalled: Slurm $(slurmd -V 2>/dev/null || echo '?') and munge binaries present"
    skip "Enroot $ENROOT_VERSION check (GPU_CLUSTER_PACKAGES=preinstalled)"
    skip "Pyxis $PYXIS_VERSION check (GPU_CLUSTER_PACKAGES=preinstalled)"
    skip "Lustre client check (GPU_CLUSTER_PACKAGES=preinstalled)"
    return 0
  fi
  slurm
  munge_pkg
  enroot
  pyxis
  lustre
}

main "$@"
