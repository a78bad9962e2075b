"""lib/accounting.sh accounting_tick: the controller's loop re-reads the database secret
and restarts slurmdbd when it rotated, but never while a boot runs nor before step 50
first wrote slurmdbd.conf (a booting controller's loop starts at step 40: its first tick
restarted slurmdbd under step 50's registration on the team lane)."""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

from tests.support.block_end import COMMON, LIB

# stands in for the boto3 interpreter running bin/gpu-cluster-slurmdbd-conf
FAKE_PY = """#!/usr/bin/env bash
echo "${STUB_SAYS:-changed}"
"""


def _tick(tmp_path: Path, conf: bool, env: str = "", ticks: int = 1) -> list[str]:
    py = tmp_path / "aws-python"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    dbd = tmp_path / "slurmdbd.conf"
    if conf:
        dbd.write_text("StorageHost=db\n")
    script = f"""
set -euo pipefail
export GPU_CLUSTER_STATE={tmp_path} GPU_CLUSTER_RUN={tmp_path} GC_STEP=munge-responder
. {COMMON}
. {LIB / "accounting.sh"}
svc() {{ echo "svc $*"; }}
ACCOUNTING_ENABLED=1 NODE_ROLE=controller NODE_NAME=ip-10-0-1-5 SLURMDBD_CONF={dbd}
GPU_CLUSTER_AWS_PYTHON={py} ACCOUNTING_SECRET_REFRESH_INTERVAL=0
{env}
for _ in $(seq {ticks}); do accounting_tick; done
"""
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return [line.split("] ", 1)[-1] for line in (r.stdout + r.stderr).splitlines()]


def test_a_rotated_secret_restarts_slurmdbd(tmp_path):
    assert _tick(tmp_path, conf=True) == [
        "accounting: the database secret changed (rotated); restarting slurmdbd",
        "svc restart slurmdbd",
    ]


def test_nothing_before_step_50_wrote_slurmdbd_conf(tmp_path):
    assert _tick(tmp_path, conf=False) == []


def test_nothing_while_a_boot_holds_the_boot_lock(tmp_path):
    with open(tmp_path / "boot.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert _tick(tmp_path, conf=True) == []
    assert _tick(tmp_path, conf=True)[-1] == "svc restart slurmdbd"  # the next tick after the boot


def test_an_unchanged_secret_with_slurmdbd_running_does_nothing(tmp_path):
    assert _tick(tmp_path, conf=True, env="export STUB_SAYS=unchanged; svc() { [[ $1 == active ]]; }") == []
