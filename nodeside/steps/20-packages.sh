#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 20: packages. Verifies, or installs exactly: Slurm $SLURM_SERIES from the OS
# archive (slurm-wlm, slurmd, slurmctld, slurm-client, with the PMIx plugin), munge,
# Enroot $ENROOT_VERSION (NVIDIA release .debs from $ENROOT_URL), Pyxis $PYXIS_VERSION
# (built from its tag at $PYXIS_URL against libslurm-dev) and the Lustre client (the
# module for the RUNNING kernel, and lustre-client-utils for mount.lustre).
# Installing needs network access (Ubuntu archive, NVIDIA releases on GitHub, the FSx
# client repository) and minutes per boot: bake an AMI by running this same step
# (`gpu-cluster-boot --only packages`) at image build time; a baked node only verifies.
# GPU_CLUSTER_PACKAGES=preinstalled checks that the Slurm and munge binaries exist (any
# version) and reports Enroot, Pyxis and Lustre as skipped (local cluster).
# GPU_CLUSTER_FSX=bind (/fsx is a bind mount, not Lustre) reports the Lustre client
# as skipped; everything else still installs and checks exact versions.
# Prerequisites: Ubuntu 24.04 (or Debian) with apt and dpkg, curl, tar, openssl; kmod
# and gnupg when the Lustre client is checked. Missing ones are named up front.
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"

: "${GPU_CLUSTER_FSX:=lustre}"
# Where the FSx client repository's entry and key go (tests point them at a temp dir).
: "${APT_SOURCES_DIR:=/etc/apt/sources.list.d}"
: "${APT_KEYRINGS_DIR:=/usr/share/keyrings}"

APT=(apt-get -o DPkg::Lock::Timeout=600 -y)
# The user data writes Slurm's files (e.g. /etc/slurm/plugstack.conf) before this step,
# and some of those paths are conffiles of the packages installed here
# (slurm-wlm-basic-plugins ships plugstack.conf). dpkg then asks what to do, finds no
# terminal and fails the install: keep the files we wrote, without asking [DPKG].
DPKG_KEEP_OURS=(-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
UPDATED=0
apt_update() {
  ((UPDATED)) && return 0
  "${APT[@]}" update || die "apt-get update failed with status $? (output above, in the boot log)"
  UPDATED=1
}
apt_install() {
  apt_update
  DEBIAN_FRONTEND=noninteractive "${APT[@]}" "${DPKG_KEEP_OURS[@]}" install --no-install-recommends "$@" ||
    die "apt-get install ${*##*/} failed with status $? (output above, in the boot log)"
}
# version_of PKG: the installed version, or nothing. dpkg-query fails for a package it
# has never seen; under pipefail that would end the step (silently) on a fresh image.
version_of() { { dpkg-query -W -f='${db:Status-Abbrev}${Version}' "$1" 2>/dev/null || true; } | sed -n 's/^ii *//p'; }
fetch() { curl -fsSL --retry 5 --retry-delay 3 --connect-timeout 10 --max-time 600 -o "$2" "$1"; }
need_bins() { local b; for b; do command -v "$b" >/dev/null || die "$b not found on PATH"; done; }
# need_tools TOOL=PACKAGE...: this step's own prerequisites, each named with its package.
need_tools() {
  local t missing=()
  for t; do command -v "${t%%=*}" >/dev/null || missing+=("${t%%=*} (package ${t#*=})"); done
  ((${#missing[@]} == 0)) || die "step 20 needs tools that are not on PATH: ${missing[*]}"
}

slurm() {
  local p v missing=()
  for p in slurm-wlm slurmd slurmctld slurm-client libpmix-dev; do
    v=$(version_of "$p")
    [[ $p == libpmix-dev || $v == "$SLURM_SERIES".* ]] && [[ -n $v ]] || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]} (Slurm $SLURM_SERIES from the OS archive)"
    apt_install slurm-wlm slurmd slurmctld slurm-client libpmix-dev
  fi
  for p in slurmd slurmctld slurm-client; do
    v=$(version_of "$p")
    [[ $v == "$SLURM_SERIES".* ]] || die "$p is '${v:-not installed}', need Slurm $SLURM_SERIES (SLURM_SERIES, from the OS archive)"
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
  local have arch dir url
  have=$(command enroot version 2>/dev/null || true)
  if [[ $have != "$ENROOT_VERSION" ]]; then
    arch=$(dpkg --print-architecture)
    dir=$(mktemp -d)
    log "installing Enroot $ENROOT_VERSION (found '${have:-none}')"
    url="$ENROOT_URL/v$ENROOT_VERSION/enroot_${ENROOT_VERSION}-1_$arch.deb"
    fetch "$url" "$dir/enroot.deb" || die "cannot download $url"
    url="$ENROOT_URL/v$ENROOT_VERSION/enroot+caps_${ENROOT_VERSION}-1_$arch.deb"
    fetch "$url" "$dir/enroot-caps.deb" || die "cannot download $url"
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
    fetch "$PYXIS_URL/v$PYXIS_VERSION.tar.gz" "$dir/pyxis.tar.gz" || die "cannot download $PYXIS_URL/v$PYXIS_VERSION.tar.gz"
    tar -xzf "$dir/pyxis.tar.gz" -C "$dir" --strip-components=1
    make -C "$dir" install >/dev/null
    rm -rf "$dir"
    [[ -f $PYXIS_SO ]] || die "Pyxis built but $PYXIS_SO is missing"
    printf '%s\n' "$PYXIS_VERSION" >"$stamp"
  fi
  log "Pyxis $PYXIS_VERSION at $PYXIS_SO"
}

# fsx_client_repo: the FSx Lustre client repository for this release, with its key.
fsx_client_repo() {
  local codename keyring="$APT_KEYRINGS_DIR/fsx-ubuntu-public-key.gpg"
  need_tools gpg=gnupg
  codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
  if [[ ! -s $keyring ]]; then
    fetch "$FSX_CLIENT_KEY_URL" - | gpg --dearmor >"$keyring" 2>/dev/null || die "cannot fetch the FSx client repository key"
  fi
  printf 'deb [signed-by=%s] %s %s main\n' "$keyring" "$FSX_CLIENT_REPO" "$codename" >"$APT_SOURCES_DIR/fsxlustreclientrepo.list"
  UPDATED=0
  apt_update
}

lustre() {
  local kernel pkg p missing=()
  if [[ $GPU_CLUSTER_FSX == bind ]]; then
    skip "Lustre client (GPU_CLUSTER_FSX=bind: /fsx is a bind mount, not Lustre)"
    return 0
  fi
  need_tools modinfo=kmod
  kernel=$(uname -r)
  pkg="lustre-client-modules-$kernel"
  if [[ -z $(version_of "$pkg") ]] && ! modinfo lustre >/dev/null 2>&1; then missing+=("$pkg"); fi
  # mount.lustre is in lustre-client-utils, only a Recommends of the module package:
  # with --no-install-recommends it must be named, or mounting /fsx fails [LUSTRE-DEB].
  command -v mount.lustre >/dev/null || missing+=(lustre-client-utils)
  if ((${#missing[@]})); then
    fsx_client_repo
    # The FSx repository lags Ubuntu kernel updates: fail loudly instead of pulling
    # another kernel that needs a reboot.
    for p in "${missing[@]}"; do
      apt-cache policy "$p" | grep -q 'Candidate: [0-9]' ||
        die "no $p for the running kernel $kernel in the FSx client repository: pin an AMI whose kernel has a Lustre client, or bake the client"
    done
    apt_install "${missing[@]}"
  fi
  modinfo lustre >/dev/null 2>&1 || die "Lustre module not available for kernel $kernel"
  command -v mount.lustre >/dev/null || die "mount.lustre not found (package lustre-client-utils): the /fsx mount would fail"
  log "Lustre client for $kernel ($(command -v mount.lustre))"
}

main() {
  need_tools curl=curl openssl=openssl
  case $GPU_CLUSTER_FSX in lustre | bind) ;; *) die "GPU_CLUSTER_FSX must be lustre or bind, not '$GPU_CLUSTER_FSX'" ;; esac
  if [[ $GPU_CLUSTER_PACKAGES == preinstalled ]]; then
    need_bins slurmd slurmctld srun sinfo scontrol sbatch munged mungekey munge unmunge
    log "preinstalled: Slurm $(slurmd -V 2>/dev/null || echo '?') and munge binaries present"
    skip "Enroot $ENROOT_VERSION check (GPU_CLUSTER_PACKAGES=preinstalled)"
    skip "Pyxis $PYXIS_VERSION check (GPU_CLUSTER_PACKAGES=preinstalled)"
    skip "Lustre client check (GPU_CLUSTER_PACKAGES=preinstalled)"
    return 0
  fi
  need_tools apt-get=apt apt-cache=apt dpkg=dpkg dpkg-query=dpkg tar=tar
  slurm
  munge_pkg
  enroot
  pyxis
  lustre
}

# Sourcing this file (tests) defines the functions without running the step.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; fi
