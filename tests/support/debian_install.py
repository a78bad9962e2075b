"""Running scripts/install-deps.sh the way a new user on stock Debian does: from a fresh
copy of the repository, with Debian's own /usr/bin/python3 and no other Python on PATH
(on this host for Debian 12, chrooted into the trixie lane's debootstrap base for 13)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Debian's default PATH for root: no pyenv, no ~/.local, no other virtualenv.
DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What a user's pip and apt need from this machine to reach the package indexes (a
# proxy, a CA bundle, index settings); nothing that names an interpreter.
_PASSED = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


def repo_copy(dst: Path) -> Path:
    """The repository's tracked files (as in the working tree) in `dst`: what a clone
    holds, without this checkout's venv/, build/ or caches."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    for name in filter(None, names):
        src = ROOT / os.fsdecode(name)
        if not src.is_file():  # deleted in the working tree
            continue
        target = dst / os.fsdecode(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    return dst


def clean_env(path: str = DEBIAN_PATH, **extra: str) -> dict[str, str]:
    """A login-like environment: Debian's PATH, HOME, the locale, the machine's pip and
    proxy settings; no PYTHON, VENV, VIRTUAL_ENV or PYTHONPATH."""
    # PIP_NO_COMPILE: pip skips writing .pyc files for the ~100 installed packages (most
    # of an install's time; Python compiles what it imports). What is installed, from
    # where and how is unchanged, and that is what these tests check.
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8", "PIP_NO_COMPILE": "1"}
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in _PASSED})
    env.update(extra)
    return env


def site_listing(python: str = "/usr/bin/python3") -> set[str]:
    """Every entry of the system interpreter's package directories (to prove nothing was
    installed into it)."""
    out = subprocess.run(
        [python, "-c", "import site, sys; print('\\n'.join(site.getsitepackages()))"],
        check=True,
        capture_output=True,
        text=True,
        env=clean_env(),
    ).stdout.split()
    return {f"{d}/{e.name}" for d in out if Path(d).is_dir() for e in Path(d).iterdir()}


# Runs argv inside an overlay of `base` (the lane's cached debootstrap root stays
# read-only), in a private mount namespace, with a clean environment. The trixie root's
# apt uses the lane's shared .deb cache and pip the host's cache, as the lanes do.
_CHROOT = r"""
set -euo pipefail
root=$1 base=$2 work=$3 debs=$4 pipcache=$5
shift 5
mount -t overlay overlay -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/work" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs -o ro sysfs "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/run"
mount -t tmpfs tmpfs "$root/tmp"
mkdir -p "$debs/partial" "$pipcache" "$root/root/.cache/pip"
mount --bind "$debs" "$root/var/cache/apt/archives"
mount --bind "$pipcache" "$root/root/.cache/pip"
exec chroot "$root" /usr/bin/env -i "$@"
"""
CA_IN_ROOT = "/etc/gpu-cluster-test/ca-certificates.crt"


def run_in_overlay(
    base: Path, work: Path, debs: Path, env: dict[str, str], script: str, timeout: int
) -> subprocess.CompletedProcess[str]:
    """`bash -c script` as root in an overlay of `base`; work/upper holds what it wrote."""
    upper, merged = work / "upper", work / "merged"
    for d in (upper / "etc" / "gpu-cluster-test", work / "work", merged):
        d.mkdir(parents=True, exist_ok=True)
    shutil.copy2("/etc/resolv.conf", upper / "etc" / "resolv.conf")
    # The host's CA bundle: the machine may reach the package index through a proxy
    # whose CA only the host trusts (the root's own bundle stays as Debian ships it).
    shutil.copy2("/etc/ssl/certs/ca-certificates.crt", upper / CA_IN_ROOT.lstrip("/"))
    pipcache = Path(os.environ.get("HOME", "/root")) / ".cache" / "pip"
    argv = [f"{k}={v}" for k, v in env.items()] + ["bash", "-c", script]
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", _CHROOT, "chroot"]
        + [str(merged), str(base), str(work), str(debs), str(pipcache), *argv],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )
