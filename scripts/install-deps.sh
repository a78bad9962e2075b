#!/usr/bin/env bash
# Installs what the tests and the local cluster need on a fresh Debian 12 machine:
# the pinned Python packages, and Debian's Slurm, munge, PMIx, shellcheck and
# cloud-init (used only as the `cloud-init schema` checker, never run as a service).
# Idempotent: packages already present are not fetched again.
set -euo pipefail

main() {
  local python="${PYTHON:-python3}"
  local debs=(slurmctld slurmd slurm-client munge libpmix2 libpmix-dev
              shellcheck cloud-init iproute2 openssl util-linux procps curl)
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
  "$python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt 2>&1 \
    | grep -v -e 'Running pip as the' -e 'is ignored: it is neither' || true
  "$python" -c 'import pulumi, pulumi_aws, pydantic, jinja2, yaml, pytest' \
    || { echo "install-deps: Python packages missing after pip install" >&2; exit 1; }
}

main "$@"
