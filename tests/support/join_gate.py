"""The join gate (nodeside/lib/join-gate.sh) as the controller's agent loop runs it, for the
unit tests (a stand-in slurmctld) and the daemon tests (a real one): the node's home with
the report program, the agent's environment, one tick in a fresh strict-mode shell."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.block_end import COMMON, LIB

REPORT = LIB.parent / "validation_report.py"
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def make_home(tmp_path: Path) -> Path:
    """tmp_path/home as a node's GPU_CLUSTER_HOME (the report program and its verdict, the
    gate's config) and tmp_path/fsx/validation, tmp_path/state; returns the home."""
    fsx, home = tmp_path / "fsx", tmp_path / "home"
    (fsx / "validation").mkdir(parents=True, exist_ok=True)
    (home / "validation").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "lib" / "validation_report.py").symlink_to(REPORT)
    (home / "lib" / "verdict.py").symlink_to(REPORT.parent / "verdict.py")
    config = {"fsx_root": str(fsx), "cluster_name": "joingate", "instance_type": "local", "gpus": 0}
    (home / "validation" / "config.json").write_text(json.dumps({**config, "thresholds": {}}))
    (tmp_path / "state").mkdir()
    return home


def agent_env(tmp_path: Path, timeout_minutes: int) -> dict[str, str]:
    """The agent's settings for make_home's tree: no settle wait, a tick on every call."""
    home = tmp_path / "home"
    return {
        "PATH": SYSTEM_PATH,
        "FSX_ROOT": str(tmp_path / "fsx"),
        "GPU_CLUSTER_HOME": str(home),
        "GPU_CLUSTER_STATE": str(tmp_path / "state"),
        "SLURM_PARTITION": "train",
        "VALIDATION_ENABLED": "1",
        "VALIDATION_JOB": str(home / "validation" / "first-boot.sbatch"),
        "VALIDATION_JOIN_TIMEOUT_MINUTES": str(timeout_minutes),
        "JOIN_SETTLE": "0",
        "JOIN_GATE_INTERVAL": "0",
        "GC_STEP": "agent",
    }


def run_agent(script: str, env: dict[str, str], now: int) -> str:
    """`script` in the agent's shell (strict mode; common.sh, join-gate.sh and node-reaper.sh
    sourced), the clock at `now`; its stdout (the log)."""
    full = f'set -euo pipefail; . "{COMMON}"; . "{LIB / "join-gate.sh"}"; . "{LIB / "node-reaper.sh"}"; {script}'
    r = subprocess.run(
        ["bash", "-c", full], env={**env, "JOIN_GATE_NOW": str(now)}, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def history(tmp_path: Path) -> list[str]:
    """The join history's lines without their time stamps."""
    path = tmp_path / "fsx" / "validation" / "join" / "history"
    return [ln.split(" ", 1)[1] for ln in path.read_text().splitlines()] if path.exists() else []
