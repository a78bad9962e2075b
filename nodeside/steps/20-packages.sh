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
# Every download is checked against its sha256 pin (DOWNLOAD_SHA256, from model/pins.py)
# before it is used; a pin of `record` (no digest could be read when it was pinned) is
# compared with this root's earlier record instead and recorded in DOWNLOAD_RECORD.
# After installing, the kernel, Lustre, Slurm, PMIx and munge packages are held, and
# needrestart and unattended-upgrades are told to leave them (and their daemons) alone.
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
# DPkg::Lock::Timeout makes apt wait for the dpkg lock only: `update` takes the lists lock
# (/var/lib/apt/lists/lock) and fails at once while apt-daily holds it (apt 2.7.14).
# apt's locks are fcntl locks, which `flock -w` does not see: retry while apt says so.
: "${APT_LISTS_LOCK_WAIT:=600}"
APT_LISTS_LOCK_RETRY=5
apt_update() {
  ((UPDATED)) && return 0
  local out rc waited=0
  while :; do
    rc=0
    out=$("${APT[@]}" update 2>&1) || rc=$?
    printf '%s\n' "$out"
    ((rc)) || break
    grep -Eq '(Could not get lock|Unable to lock directory) /var/lib/apt/lists/' <<<"$out" ||
      die "apt-get update failed with status $rc (output above, in the boot log)"
    ((waited < APT_LISTS_LOCK_WAIT)) ||
      die "apt-get update: the apt lists lock (/var/lib/apt/lists/lock) was still held after ${waited}s: $(grep -m1 'Could not get lock' <<<"$out")"
    log "apt lists lock held (apt-daily?): retrying apt-get update in ${APT_LISTS_LOCK_RETRY}s"
    sleep "$APT_LISTS_LOCK_RETRY"
    waited=$((waited + APT_LISTS_LOCK_RETRY))
  done
  UPDATED=1
}
apt_install() {
  apt_update
  DEBIAN_FRONTEND=noninteractive "${APT[@]}" "${DPKG_KEEP_OURS[@]}" install --no-install-recommends "$@" ||
    die "apt-get install ${*##*/} failed with status $? (output above, in the boot log)"
}
# version_of PKG: the installed version, or nothing. dpkg-query fails for a package it
# has never seen; under pipefail that would end the step (silently) on a fresh image.
# `hi`: installed and held (this step holds Slurm, munge, Lustre and the kernel).
version_of() { { dpkg-query -W -f='${db:Status-Abbrev}${Version}' "$1" 2>/dev/null || true; } | sed -n 's/^[ih]i *//p'; }
fetch() { curl -fsSL --retry 5 --retry-delay 3 --connect-timeout 10 --max-time 600 -o "$2" "$1"; }
# pin_of FILE: the pinned sha256 (or `record`) of a download, from DOWNLOAD_SHA256.
pin_of() {
  local w
  for w in ${DOWNLOAD_SHA256:-}; do [[ ${w%%=*} == "$1" ]] && { printf '%s\n' "${w#*=}"; return 0; }; done
  die "no sha256 pin for $1 in DOWNLOAD_SHA256 (model/pins.py pins: ${DOWNLOAD_SHA256:-none})"
}
# fetch_pinned URL PATH: download, then check the file against its pin before anything
# uses it. `record`: no digest could be read when the pin was made; compare with this
# root's earlier record (a baked image's) and record it for the manifest and later bakes.
fetch_pinned() {
  local file=${1##*/} want got rec
  want=$(pin_of "$file")
  fetch "$1" "$2" || die "cannot download $1"
  got=$(sha256sum "$2") && got=${got%% *}
  if [[ $want == record ]]; then
    rec=$(awk -v f="$file" '$2 == f { d = $1 } END { print d }' "$DOWNLOAD_RECORD" 2>/dev/null || true)
    [[ -z $rec || $rec == "$got" ]] ||
      die "sha256 mismatch for $file from $1: expected $rec (recorded in $DOWNLOAD_RECORD), got $got"
    mkdir -p "${DOWNLOAD_RECORD%/*}"
    { awk -v f="$file" '$2 != f' "$DOWNLOAD_RECORD" 2>/dev/null || true; printf '%s  %s\n' "$got" "$file"; } >"$DOWNLOAD_RECORD.new"
    mv -f "$DOWNLOAD_RECORD.new" "$DOWNLOAD_RECORD"
    warn "$file is not pinned (no published digest): sha256 $got recorded in $DOWNLOAD_RECORD; pin it in model/pins.py"
  else
    [[ $got == "$want" ]] || die "sha256 mismatch for $file from $1: expected $want, got $got"
    log "$file sha256 $got matches its pin"
  fi
}
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
  local have arch dir
  have=$(command enroot version 2>/dev/null || true)
  if [[ $have != "$ENROOT_VERSION" ]]; then
    arch=$(dpkg --print-architecture)
    dir=$(mktemp -d)
    log "installing Enroot $ENROOT_VERSION (found '${have:-none}')"
    fetch_pinned "$ENROOT_URL/v$ENROOT_VERSION/enroot_${ENROOT_VERSION}-1_$arch.deb" "$dir/enroot.deb"
    fetch_pinned "$ENROOT_URL/v$ENROOT_VERSION/enroot+caps_${ENROOT_VERSION}-1_$arch.deb" "$dir/enroot-caps.deb"
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
    fetch_pinned "$PYXIS_URL/v$PYXIS_VERSION.tar.gz" "$dir/pyxis.tar.gz"
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

# Packages a running cluster must keep as installed: the kernel (the Lustre module is
# built for one exact kernel, and a meta package would pull a newer one), the Lustre
# client, Slurm with PMIx, and munge (their maintainer scripts restart the daemons).
HOLD_PATTERNS=('linux-image-*' 'linux-headers-*' 'linux-modules-*' 'linux-aws*' 'linux-generic*'
  'linux-virtual*' 'lustre-client-*' 'slurm*' 'libslurm*' 'libpmix*' 'munge' 'libmunge*')
: "${NODE_TEMPLATES:=$GPU_CLUSTER_HOME/templates}"
# hold_and_quiet: hold those packages and install the needrestart and unattended-upgrades
# drop-ins, so no upgrade restarts munge or Slurm or changes the kernel on a running cluster.
hold_and_quiet() {
  local held=()
  mkdir -p "${NEEDRESTART_DROPIN%/*}" "${UNATTENDED_UPGRADES_DROPIN%/*}"
  install -m 0644 "$NODE_TEMPLATES/needrestart.conf" "$NEEDRESTART_DROPIN"
  install -m 0644 "$NODE_TEMPLATES/unattended-upgrades.conf" "$UNATTENDED_UPGRADES_DROPIN"
  # dpkg-query fails when a pattern matches nothing; the others are still listed.
  mapfile -t held < <({ dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "${HOLD_PATTERNS[@]}" 2>/dev/null || true; } |
    awk '$1 ~ /^[ih]i$/ { print $2 }')
  ((${#held[@]})) || die "no kernel, Lustre, Slurm or munge package found to hold (dpkg-query ${HOLD_PATTERNS[*]})"
  apt-mark hold "${held[@]}" >/dev/null || die "apt-mark hold ${held[*]} failed with status $?"
  log "held ${held[*]}; needrestart leaves munge/Slurm running; unattended-upgrades skips kernel, Lustre, Slurm, munge"
}

main() {
  need_tools curl=curl openssl=openssl sha256sum=coreutils awk=mawk
  case $GPU_CLUSTER_FSX in lustre | bind) ;; *) die "GPU_CLUSTER_FSX must be lustre or bind, not '$GPU_CLUSTER_FSX'" ;; esac
  if [[ $GPU_CLUSTER_PACKAGES == preinstalled ]]; then
    need_bins slurmd slurmctld srun sinfo scontrol sbatch munged mungekey munge unmunge
    log "preinstalled: Slurm $(slurmd -V 2>/dev/null || echo '?') and munge binaries present"
    skip "Enroot $ENROOT_VERSION check (GPU_CLUSTER_PACKAGES=preinstalled)"
    skip "Pyxis $PYXIS_VERSION check (GPU_CLUSTER_PACKAGES=preinstalled)"
    skip "Lustre client check (GPU_CLUSTER_PACKAGES=preinstalled)"
    return 0
  fi
  need_tools apt-get=apt apt-cache=apt apt-mark=apt dpkg=dpkg dpkg-query=dpkg tar=tar
  slurm
  munge_pkg
  enroot
  pyxis
  lustre
  hold_and_quiet
}

# Sourcing this file (tests) defines the functions without running the step.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; fi
