"""A boot step retried from that step, where it needs root (mount namespace); the rest is tests/nodeside/test_boot_retry.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.boot_sandbox import BOOT, Sandbox, _retry_settings, needs_root


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    b = Sandbox(tmp_path)
    shutil.copy(BOOT / "bin" / "gpu-cluster-boot", b.home / "bin" / "gpu-cluster-boot")
    shutil.copy(BOOT / "lib" / "common.sh", b.home / "lib" / "common.sh")
    return b


@needs_root
def test_fsx_appearing_late_is_retried_and_recovers_without_a_reboot(box):
    """The real step 30-fsx: /fsx is not mounted at first and shows up 2 s later."""
    shutil.copy(BOOT / "steps" / "30-fsx.sh", box.home / "steps" / "30-fsx.sh")
    shutil.rmtree(box.fsx / ".gpu-cluster")
    with (box.etc / "cluster.env").open("a") as f:
        f.write("FSX_DNS_NAME=fs-1.fsx.example\nFSX_MOUNT_NAME=abc\nFSX_MOUNT_TRIES=1\n")
    _retry_settings(box, attempts=5, delay=1)  # retries at +1, +3, +7, +15 s
    modinfo = shutil.which("modinfo", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if modinfo and subprocess.run([modinfo, "lustre"], capture_output=True).returncode == 0:
        pytest.skip("this host has a Lustre client")
    # The shared directory is bind-mounted on /fsx 2 s after the boot starts, in the
    # boot's own (private) mount namespace.
    inner = f'(sleep 2; mount --bind "{box.fsx}" "{box.fsx}") & exec "$@"'
    cmd = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "bash",
        "-c",
        inner,
        "boot",
        str(box.home / "bin" / "gpu-cluster-boot"),
    ]
    r = subprocess.run(
        cmd, env=box.env(GPU_CLUSTER_PACKAGES="preinstalled"), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr
    log = (box.log_dir / "boot.log").read_text()
    assert "FAILED 30-fsx" in log and "retrying from 30-fsx" in log
    st = box.status()
    assert (st["step"], st["state"]) == ("30-fsx", "ok")
    assert st["marker"].startswith(str(box.fsx_root))  # the marker reached /fsx
    assert (box.fsx_root / "munge" / "requests").is_dir()
