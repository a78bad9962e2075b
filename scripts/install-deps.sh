#!/usr/bin/env bash
# Installs what the tests and the local cluster need on a fresh Debian 12 or 13 machine.
#
# Everything Python goes into the project virtualenv, the directory Pulumi.yaml names
# (`runtime.options.virtualenv`, `venv/`), so `pulumi`, `make check`, `make test` and
# `make local-cluster` share one hash-locked set (requirements-dev.txt: every package,
# transitive ones included, pinned with hashes). Nothing is pip-installed into the
# system interpreter: Debian's python3 is externally managed and refuses it (PEP 668,
# /usr/lib/python3.*/EXTERNALLY-MANAGED) [PEP-668].
#
# Debian packages: python3 and python3-venv (Debian ships venv's ensurepip separately),
# Slurm, munge, PMIx, shellcheck and cloud-init (used only as the `cloud-init schema`
# checker, never run as a service), plus what the faithful lane needs to build and boot
# systemd-nspawn machines (debootstrap, squashfs, a compiler and libslurm-dev for Pyxis,
# makeself for Enroot), and for the accounting lane slurmdbd and MariaDB's server and
# client (the lane's stand-in for the RDS for MariaDB database, in its own network
# namespace), and the -dev packages the slurm2311 lane's Slurm 23.11 build links against
# (localcluster/slurm_build.py BUILD_DEPS). Idempotent: packages already present are not fetched again, and
# the virtualenv is refilled only when the lock or the interpreter changed.
#
# Usage: scripts/install-deps.sh [--python | --venv]
#   (none)    Debian packages (as root), then the virtualenv      (make deps / make test)
#   --python  python3 and python3-venv only (as root, when missing), then the virtualenv
#   --venv    the virtualenv only: no root, no apt                  (make check-deps)
# Environment: PYTHON (the interpreter that creates the virtualenv, default python3),
# VENV (default: the directory Pulumi.yaml names).
set -euo pipefail

PYTHON_DEBS=(python3 python3-venv)
LANE_DEBS=(slurmctld slurmd slurmdbd slurm-client munge libpmix2 libpmix-dev
           mariadb-server-core mariadb-client-core
           shellcheck cloud-init iproute2 openssl util-linux procps curl
           systemd-container debootstrap debian-archive-keyring squashfs-tools
           build-essential libbsd-dev libslurm-dev makeself jq
           libmunge-dev libhwloc-dev libjson-c-dev libdbus-1-dev liblz4-dev libnuma-dev
           libpam0g-dev libyaml-dev libreadline-dev libssl-dev libmariadb-dev pkg-config binutils)
LOCK=requirements-dev.txt

die() { echo "install-deps: $*" >&2; exit 1; }

# The virtualenv Pulumi.yaml names: `pulumi` runs the program with it, so it is the one.
project_venv() {
  local name
  name=$(sed -n 's/^ *virtualenv: *\([^ #]*\).*$/\1/p' Pulumi.yaml | head -n 1)
  [[ -n $name ]] || die "Pulumi.yaml names no runtime.options.virtualenv"
  echo "$name"
}

missing_debs() {
  local pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || echo "$pkg"
  done
}

apt_install() {
  local missing
  mapfile -t missing < <(missing_debs "$@")
  ((${#missing[@]})) || return 0
  [[ $(id -u) -eq 0 ]] || die "Debian packages missing: ${missing[*]}; run as root, or: sudo apt-get install ${missing[*]}"
  echo "install-deps: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  # Debian's slurm/munge packages try to start their services on install; a
  # policy-rc.d that refuses keeps this machine's daemons to what tests start.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || { rm -f /usr/sbin/policy-rc.d; die "apt-get install ${missing[*]} failed"; }
  rm -f /usr/sbin/policy-rc.d
}

# What the virtualenv was filled from: the lock and the project metadata (entry points),
# and the interpreter's version.
# The project's editable install: a path .pth (setuptools' compat mode) instead of its
# default import hook. The hook's module imports pathlib and importlib.util in every
# Python the venv starts (about 15 ms each); `make check` starts about 700 (CLIs,
# node programs, the gate's verdict steps) and spent a fifth of its CPU there.
EDITABLE_MODE=compat

fill_key() {
  printf '%s %s %s\n' "$(cat "$LOCK" pyproject.toml | sha256sum | cut -d' ' -f1)" \
    "$("$1/bin/python" -c 'import sys; print(sys.version)' | head -n 1)" "editable=$EDITABLE_MODE"
}

make_venv() {
  local python=$1 venv=$2
  command -v "$python" >/dev/null || die "no $python on PATH; install Debian's: apt-get install python3 python3-venv"
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$python is Python $("$python" -c 'import platform; print(platform.python_version())'); gpu-cluster needs 3.11 or newer (pyproject.toml)"
  if [[ -x $venv/bin/python ]] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    return 0
  fi
  rm -rf "$venv"
  # Debian's python3 has venv but not ensurepip without python3-venv: the create fails
  # ("ensurepip is not available") and leaves a virtualenv without pip.
  "$python" -m venv "$venv" \
    || { rm -rf "$venv"; die "$python -m venv $venv failed; on Debian: apt-get install python3-venv (or run scripts/install-deps.sh --python as root)"; }
}

fill_venv() {
  local venv=$1 stamp="$1/.installed"
  if [[ -f $stamp && $(cat "$stamp") == "$(fill_key "$venv")" ]]; then
    return 0
  fi
  # --require-hashes: a package whose bytes differ from the lock fails the install.
  # The filter drops pip's local-index chatter; pipefail keeps pip's status.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --require-hashes -r "$LOCK" 2>&1 \
    | { grep -v -e 'is ignored: it is neither' || true; } \
    || die "$venv/bin/python -m pip install --require-hashes -r $LOCK failed"
  # The project itself, editable and without dependencies (the lock has them all, and
  # its setuptools builds it, so nothing unhashed is fetched): the console entry points
  # (venv/bin/gpu-cluster-ops, ...) and the policy pack import the installed package.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
    --config-settings editable_mode="$EDITABLE_MODE" -e . 2>&1 \
    | { grep -v -e 'is ignored: it is neither' || true; } \
    || die "$venv/bin/python -m pip install --no-deps -e . failed"
  "$venv/bin/python" -c 'import pulumi, pulumi_aws, pydantic, jinja2, yaml, boto3, pytest, mypy, ruff, policy.rules' \
    || die "Python packages missing from $venv after pip install"
  fill_key "$venv" > "$stamp"
}

main() {
  local mode=${1:-all}
  case $mode in
    all|--python|--venv) ;;
    *) echo "usage: scripts/install-deps.sh [--python | --venv]" >&2; exit 2 ;;
  esac
  cd "$(dirname "$0")/.."
  local python=${PYTHON:-python3} venv=${VENV:-$(project_venv)}
  case $mode in
    all) apt_install "${PYTHON_DEBS[@]}" "${LANE_DEBS[@]}" ;;
    --python) apt_install "${PYTHON_DEBS[@]}" ;;
  esac
  make_venv "$python" "$venv"
  fill_venv "$venv"
}

main "$@"
