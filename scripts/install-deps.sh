#!/usr/bin/env bash
# Installs what the tests and the local cluster need on a fresh Debian 12 machine:
# the locked Python packages (requirements-dev.txt: every package, transitive ones
# included, pinned with hashes), and Debian's Slurm, munge, PMIx, shellcheck and
# cloud-init (used only as the `cloud-init schema` checker, never run as a service),
# plus what the faithful lane needs to build and boot systemd-nspawn machines
# (debootstrap, squashfs, a compiler and libslurm-dev for Pyxis, makeself for Enroot).
# Idempotent: packages already present are not fetched again.
set -euo pipefail

main() {
  local python="${PYTHON:-python3}"
  local debs=(slurmctld slurmd slurm-client munge libpmix2 libpmix-dev
              shellcheck cloud-init iproute2 openssl util-linux procps curl
              systemd-container debootstrap debian-archive-keyring squashfs-tools
              build-essential libbsd-dev libslurm-dev makeself jq)
  local missing=()
  local pkg
  for pkg in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    echo "install-deps: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    # Debian's slurm/munge packages try to start their services on install; a
    # policy-rc.d that refuses keeps this machine's daemons to what tests start.
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    rm -f /usr/sbin/policy-rc.d
  fi
  # --require-hashes: a package whose bytes differ from the lock fails the install.
  # The filter drops pip's root and local-index chatter; pipefail keeps pip's status.
  "$python" -m pip install -q --disable-pip-version-check --require-hashes -r requirements-dev.txt 2>&1 \
    | { grep -v -e 'Running pip as the' -e 'is ignored: it is neither' || true; } \
    || { echo "install-deps: pip install --require-hashes -r requirements-dev.txt failed" >&2; exit 1; }
  "$python" -c 'import pulumi, pulumi_aws, pydantic, jinja2, yaml, boto3, pytest, mypy, ruff' \
    || { echo "install-deps: Python packages missing after pip install" >&2; exit 1; }
}

main "$@"
