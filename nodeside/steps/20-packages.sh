#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 20: packages. Verifies, or installs exactly: Slurm $SLURM_SERIES from the OS
# archive (slurm-wlm, slurmd, slurmctld, slurmdbd, slurm-client, with the PMIx plugin;
# slurmdbd on every image, run only by a controller with accounting), munge,
# Enroot $ENROOT_VERSION (NVIDIA release .debs from $ENROOT_URL), Pyxis $PYXIS_VERSION
# (built from its tag at $PYXIS_URL against libslurm-dev), the Lustre client (the
# module for the RUNNING kernel, and lustre-client-utils for mount.lustre), and boto3
# for the controller's agents in its own virtualenv ($AWS_VENV), and the CloudWatch agent
# $CLOUDWATCH_AGENT_VERSION (Amazon's signed release .deb; docs/logs.md).
# Installing needs network access (Ubuntu archive, NVIDIA releases on GitHub, the FSx
# client repository) and minutes per boot: bake an image by running this same step
# with GPU_CLUSTER_BAKE=1 (`python3 -m ops bake`, and the local lanes' roots): it then
# checks the Lustre module for the image's own kernel, and gpu-cluster-bake records a
# manifest. A node booting from a baked image (the manifest exists) only compares what
# is installed with the manifest and the pins: no apt, no download (docs/images.md).
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
# The image manifest and the program that writes and checks it (tests point them elsewhere).
: "${IMAGE_MANIFEST:=/var/lib/gpu-cluster-image/manifest.json}"
: "${BAKE_PROGRAM:=$GPU_CLUSTER_HOME/bin/gpu-cluster-bake}"

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
  for p in slurm-wlm slurmd slurmctld slurmdbd slurm-client libpmix-dev; do
    v=$(version_of "$p")
    [[ $p == libpmix-dev || $v == "$SLURM_SERIES".* ]] && [[ -n $v ]] || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]} (Slurm $SLURM_SERIES from the OS archive)"
    apt_install slurm-wlm slurmd slurmctld slurmdbd slurm-client libpmix-dev
  fi
  for p in slurmd slurmctld slurmdbd slurm-client; do
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

# lustre_module_why KERNEL: nothing when the Lustre client module for KERNEL is in its
# module tree and built for it (vermagic); else why not (gpu-cluster-bake lustre-module).
lustre_module_why() {
  local why
  why=$("$BAKE_PROGRAM" lustre-module "$1" 2>&1 >/dev/null) && return 0
  printf '%s\n' "${why#gpu-cluster-bake lustre-module: }"
}

lustre() {
  local kernel pkg p missing=() which="running kernel" why
  if [[ $GPU_CLUSTER_FSX == bind ]]; then
    skip "Lustre client (GPU_CLUSTER_FSX=bind: /fsx is a bind mount, not Lustre)"
    return 0
  fi
  need_tools modinfo=kmod
  kernel=$(uname -r)
  # A bake checks the kernel the image boots, which need not be the one running the bake.
  if [[ -n ${BAKE_KERNEL:-} ]]; then kernel=$BAKE_KERNEL which="image's kernel"; fi
  pkg="lustre-client-modules-$kernel"
  if [[ -z $(version_of "$pkg") && -n $(lustre_module_why "$kernel") ]]; then missing+=("$pkg"); fi
  # mount.lustre is in lustre-client-utils, only a Recommends of the module package:
  # with --no-install-recommends it must be named, or mounting /fsx fails [LUSTRE-DEB].
  command -v mount.lustre >/dev/null || missing+=(lustre-client-utils)
  if ((${#missing[@]})); then
    fsx_client_repo
    # The FSx repository lags Ubuntu kernel updates: fail loudly instead of pulling
    # another kernel that needs a reboot.
    for p in "${missing[@]}"; do
      apt-cache policy "$p" | grep -q 'Candidate: [0-9]' ||
        die "no $p for the $which $kernel in the FSx client repository: pin an AMI whose kernel has a Lustre client, or bake the client"
    done
    apt_install "${missing[@]}"
  fi
  why=$(lustre_module_why "$kernel")
  [[ -z $why ]] || die "Lustre module not available for the $which $kernel: $why"
  command -v mount.lustre >/dev/null || die "mount.lustre not found (package lustre-client-utils): the /fsx mount would fail"
  log "Lustre client for $kernel ($(command -v mount.lustre))"
}

# aws_python: boto3 for the controller's agents (lib/aws_client.py), in its own virtualenv
# at AWS_VENV: the OS's python3-boto3 decides nothing (Debian 12's 1.26 lacks
# DescribeInstanceTopology), and the versions are the ones the tests check requests with.
# pip checks every wheel against the hashes in AWS_REQUIREMENTS (--require-hashes), so
# these downloads are pinned like the others. AWS_WHEELS (a local directory of those
# wheels: the lanes' mirror, or a bake's copy) installs without an index.
aws_python() {
  local want have index=()
  want=$(sha256sum <"$AWS_REQUIREMENTS") && want=${want%% *}
  have=$(cat "$AWS_VENV/.requirements.sha256" 2>/dev/null || true)
  if [[ $have != "$want" ]] || ! "$GPU_CLUSTER_AWS_PYTHON" -c 'import boto3' 2>/dev/null; then
    log "installing boto3 into $AWS_VENV (pinned in $AWS_REQUIREMENTS)"
    python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
    python3 -m venv --clear "$AWS_VENV" || die "python3 -m venv $AWS_VENV failed with status $?"
    if [[ -n ${AWS_WHEELS:-} ]]; then index=(--no-index --find-links "$AWS_WHEELS"); fi
    "$AWS_VENV/bin/pip" install --quiet --disable-pip-version-check --no-input --require-hashes --no-deps \
      --only-binary=:all: "${index[@]}" -r "$AWS_REQUIREMENTS" ||
      die "pip install -r $AWS_REQUIREMENTS into $AWS_VENV failed with status $? (a hash mismatch names the file; output above, in the boot log)"
    printf '%s\n' "$want" >"$AWS_VENV/.requirements.sha256"
  fi
  have=$("$GPU_CLUSTER_AWS_PYTHON" -c 'import boto3, botocore; print(boto3.__version__, botocore.__version__)') ||
    die "$GPU_CLUSTER_AWS_PYTHON cannot import boto3"
  log "boto3/botocore $have in $AWS_VENV"
}

# cloudwatch_agent: the Amazon CloudWatch agent (step 25 configures and starts it;
# docs/logs.md), in neither Ubuntu's nor Debian's archive: the pinned release .deb at
# CLOUDWATCH_AGENT_URL (a versioned path), checked like every download (fetch_pinned) and
# installed only when its detached signature (.sig beside it) verifies with Amazon's key,
# which is itself accepted only with the fingerprint pinned in cluster.env [CW-AGENT-SIG]:
# a swapped key file would otherwise vouch for a swapped package. On every image: a baked
# image serves stacks with and without `logs`. CLOUDWATCH_SKIP=<reason>: not installed.
cloudwatch_agent() {
  local have dir
  if [[ -n ${CLOUDWATCH_SKIP:-} ]]; then
    skip "CloudWatch agent $CLOUDWATCH_AGENT_VERSION ($CLOUDWATCH_SKIP)"
    return 0
  fi
  have=$(version_of amazon-cloudwatch-agent)
  if [[ ${have%%-*} != "$CLOUDWATCH_AGENT_VERSION" ]]; then
    need_tools gpg=gnupg
    log "installing the CloudWatch agent $CLOUDWATCH_AGENT_VERSION (found '${have:-none}')"
    dir=$(mktemp -d)
    fetch_pinned "$CLOUDWATCH_AGENT_URL" "$dir/${CLOUDWATCH_AGENT_URL##*/}"
    fetch "$CLOUDWATCH_AGENT_URL.sig" "$dir/agent.sig" || die "cannot download $CLOUDWATCH_AGENT_URL.sig"
    fetch "$CLOUDWATCH_AGENT_KEY_URL" "$dir/agent-key.gpg" || die "cannot download $CLOUDWATCH_AGENT_KEY_URL"
    verify_signature "$dir/agent-key.gpg" "$dir/agent.sig" "$dir/${CLOUDWATCH_AGENT_URL##*/}"
    apt_install "$dir/${CLOUDWATCH_AGENT_URL##*/}"
    rm -rf "$dir"
    have=$(version_of amazon-cloudwatch-agent)
  fi
  [[ ${have%%-*} == "$CLOUDWATCH_AGENT_VERSION" ]] ||
    die "amazon-cloudwatch-agent is '${have:-not installed}', need $CLOUDWATCH_AGENT_VERSION (CLOUDWATCH_AGENT_VERSION)"
  log "CloudWatch agent $have (signature checked with key $CLOUDWATCH_AGENT_KEY_FINGERPRINT)"
}

# verify_signature KEYFILE SIG FILE: FILE carries a good signature by the key whose
# fingerprint is CLOUDWATCH_AGENT_KEY_FINGERPRINT, checked in a keyring of its own (the
# node's keyrings are neither read nor changed). --no-autostart: public keys need no
# gpg-agent, and an agent started for the throwaway home would outlive the boot.
verify_signature() {
  local home status fprs
  home=$(mktemp -d)
  gpg --homedir "$home" --no-autostart --batch --quiet --import "$1" 2>/dev/null || die "cannot read the key file from $CLOUDWATCH_AGENT_KEY_URL"
  fprs=$(gpg --homedir "$home" --no-autostart --batch --with-colons --fingerprint 2>/dev/null | awk -F: '$1 == "fpr" { print $10 }')
  grep -qx "$CLOUDWATCH_AGENT_KEY_FINGERPRINT" <<<"$fprs" ||
    die "the key from $CLOUDWATCH_AGENT_KEY_URL is ${fprs%%$'\n'*}, not the pinned $CLOUDWATCH_AGENT_KEY_FINGERPRINT: not installing the CloudWatch agent"
  status=$(gpg --homedir "$home" --no-autostart --batch --status-fd 1 --verify "$2" "$3" 2>/dev/null || true)
  rm -rf "$home"
  grep -E '^\[GNUPG:\] VALIDSIG ' <<<"$status" | grep -qw "$CLOUDWATCH_AGENT_KEY_FINGERPRINT" ||
    die "${3##*/} from $CLOUDWATCH_AGENT_URL has no good signature by $CLOUDWATCH_AGENT_KEY_FINGERPRINT ($2): not installing it"
}

# Packages a running cluster must keep as installed: the kernel (the Lustre module is
# built for one exact kernel, and a meta package would pull a newer one), the Lustre
# client, Slurm with PMIx, and munge (their maintainer scripts restart the daemons).
HOLD_PATTERNS=('linux-image-*' 'linux-headers-*' 'linux-modules-*' 'linux-aws*' 'linux-generic*'
  'linux-virtual*' 'lustre-client-*' 'slurm*' 'libslurm*' 'libpmix*' 'munge' 'libmunge*')
# Exported: a bake's gpu-cluster-bake record compares the drop-ins with these templates.
export NODE_TEMPLATES=${NODE_TEMPLATES:-$GPU_CLUSTER_HOME/templates}
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

# node_image MANIFEST_SHA256 KERNEL: what this node booted from, for its status marker
# (gpu-cluster-boot reads image.env) and `ops status`'s drift columns.
node_image() {
  printf 'NODE_IMAGE_MANIFEST=%s\nNODE_KERNEL=%s\n' "$1" "$2" | atomic_write "$GPU_CLUSTER_STATE/image.env" 0644
}

# baked: this root is a baked image (its manifest exists): compare what is installed with
# the manifest and this stack's pins, and move on. No apt, no download: a difference
# fails the step, naming it (an image baked for other pins, a package changed since).
baked() {
  local out line digest=none kernel want
  out=$("$BAKE_PROGRAM" verify 2>&1) || die "baked image ($IMAGE_MANIFEST): ${out#gpu-cluster-bake verify: }"
  while IFS= read -r line; do
    case $line in
      NODE_IMAGE_MANIFEST=*) digest=${line#*=} ;;
      NODE_KERNEL=*) kernel=${line#*=} ;;
      '# '*) skip "${line#\# }" ;;
    esac
  done <<<"$out"
  # boto3's virtualenv is part of the image: its pins must be the payload's (aws_python
  # would otherwise download wheels at boot).
  want=$(sha256sum <"$AWS_REQUIREMENTS") && want=${want%% *}
  [[ $(cat "$AWS_VENV/.requirements.sha256" 2>/dev/null) == "$want" ]] ||
    die "baked image: boto3 in $AWS_VENV was not installed from this $AWS_REQUIREMENTS (other pins): bake a new image (python3 -m ops bake) and pin it"
  node_image "$digest" "$(uname -r)"
  log "baked image: manifest sha256 $digest; Slurm, munge, PMIx, Enroot $ENROOT_VERSION, Pyxis $PYXIS_VERSION, kernel ${kernel:-?}, boto3, holds and drop-ins as baked; nothing downloaded"
}

# bake_kernel: in a bake (GPU_CLUSTER_BAKE=1), the kernel the image boots, for lustre().
bake_kernel() {
  BAKE_KERNEL=$("$BAKE_PROGRAM" kernel) || die "cannot tell the image's kernel (gpu-cluster-bake kernel)"
  if [[ -z $BAKE_KERNEL && $GPU_CLUSTER_FSX == lustre ]]; then
    die "the image has no kernel of its own (/boot/vmlinuz-*): cannot bake a Lustre client for it"
  fi
  log "baking an image: kernel ${BAKE_KERNEL:-none (GPU_CLUSTER_FSX=$GPU_CLUSTER_FSX)}"
}

main() {
  local out
  case $GPU_CLUSTER_FSX in lustre | bind) ;; *) die "GPU_CLUSTER_FSX must be lustre or bind, not '$GPU_CLUSTER_FSX'" ;; esac
  if [[ $GPU_CLUSTER_PACKAGES == preinstalled ]]; then
    need_bins slurmd slurmctld srun sinfo scontrol sbatch sacctmgr munged mungekey munge unmunge
    if [[ ${ACCOUNTING_ENABLED:-0} == 1 ]]; then need_bins slurmdbd; fi
    log "preinstalled: Slurm $(slurmd -V 2>/dev/null || echo '?') and munge binaries present"
    skip "Enroot $ENROOT_VERSION check (GPU_CLUSTER_PACKAGES=preinstalled)"
    skip "Pyxis $PYXIS_VERSION check (GPU_CLUSTER_PACKAGES=preinstalled)"
    skip "Lustre client check (GPU_CLUSTER_PACKAGES=preinstalled)"
    skip "boto3 for the controller's agents (GPU_CLUSTER_PACKAGES=preinstalled)"
    skip "CloudWatch agent $CLOUDWATCH_AGENT_VERSION (GPU_CLUSTER_PACKAGES=preinstalled)"
    node_image none "$(uname -r)"
    return 0
  fi
  if [[ ${GPU_CLUSTER_BAKE:-0} != 1 && -e $IMAGE_MANIFEST ]]; then
    baked
    return 0
  fi
  need_tools curl=curl openssl=openssl sha256sum=coreutils awk=mawk
  need_tools apt-get=apt apt-cache=apt apt-mark=apt dpkg=dpkg dpkg-query=dpkg tar=tar
  [[ ${GPU_CLUSTER_BAKE:-0} != 1 ]] || bake_kernel
  slurm
  munge_pkg
  enroot
  pyxis
  lustre
  aws_python
  cloudwatch_agent
  hold_and_quiet
  if [[ ${GPU_CLUSTER_BAKE:-0} == 1 ]]; then
    out=$("$BAKE_PROGRAM" record 2>&1) || die "bake: ${out#gpu-cluster-bake record: }"
    log "$out"
  else
    node_image none "$(uname -r)"
  fi
}

# Sourcing this file (tests) defines the functions without running the step.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; fi
