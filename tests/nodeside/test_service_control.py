"""Service control in lib/common.sh (direct mode): stopping a daemon that ignores
SIGTERM, and noticing a daemon that runs with an older config than the one on disk.

Both matter when a replaced controller publishes a new address: a worker's slurmd that
still retries the dead controller ignores SIGTERM, and a failed earlier attempt of step
50 may have written slurm.conf without restarting slurmd.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

COMMON = Path(__file__).resolve().parents[2] / "nodeside/lib/common.sh"


def _bash(tmp_path: Path, script: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "GPU_CLUSTER_SERVICE_MANAGER": "direct",
        "GPU_CLUSTER_RUN": str(tmp_path / "run"),
        "GPU_CLUSTER_LOG_DIR": str(tmp_path / "log"),
        "GPU_CLUSTER_STATE": str(tmp_path / "state"),
        "GC_STEP": "test",
    }
    return subprocess.run(
        ["bash", "-c", f'set -euo pipefail; . "{COMMON}"; {script}'],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def fake_slurmd(tmp_path):
    """A process named like slurmd that ignores SIGTERM, with its direct-mode pid file."""
    (tmp_path / "run").mkdir()
    proc = subprocess.Popen(["bash", "-c", 'trap "" TERM; exec -a slurmd-stand-in sleep 600'], start_new_session=True)
    (tmp_path / "run" / "slurmd.pid").write_text(f"{proc.pid}\n")
    for _ in range(50):  # until exec has replaced bash (cmdline names slurmd)
        if b"slurmd" in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            break
        time.sleep(0.05)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_stop_escalates_to_sigkill_after_the_bound(tmp_path, fake_slurmd):
    r = _bash(tmp_path, "GC_STOP_TIMEOUT=1 direct_stop slurmd")
    assert r.returncode == 0, r.stderr + r.stdout
    assert fake_slurmd.wait(timeout=15) == -9
    assert f"slurmd (pid {fake_slurmd.pid}) did not exit on SIGTERM; sending SIGKILL" in r.stdout
    assert not (tmp_path / "run" / "slurmd.pid").exists()


def test_older_than_compares_start_time_with_config_writes(tmp_path, fake_slurmd):
    conf = tmp_path / "slurm.conf"
    conf.write_text("old\n")
    os.utime(conf, (time.time() - 3600, time.time() - 3600))
    assert _bash(tmp_path, f'svc_older_than slurmd "{conf}"').returncode == 1
    # Written after slurmd started: slurmd runs with the older config.
    os.utime(conf, (time.time() + 5, time.time() + 5))
    assert _bash(tmp_path, f'svc_older_than slurmd "{tmp_path}/absent" "{conf}"').returncode == 0
    # Not running: nothing is older.
    fake_slurmd.kill()
    fake_slurmd.wait()
    assert _bash(tmp_path, f'svc_older_than slurmd "{conf}"').returncode == 1
