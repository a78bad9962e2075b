"""lib/repair.sh: the repair agent's turn in the controller's agent loop.

It runs the agent with the node's boto3 interpreter (GPU_CLUSTER_AWS_PYTHON), passes it
the controller's own node name and the test clock, logs each line it prints, at most once
per REPAIR_INTERVAL, and not at all with policy `none`; without the boto3 interpreter it
says so once and runs with python3.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.block_end import COMMON, LIB

# stands in for the interpreter: prints what it was given, as the agent prints actions
FAKE_PY = """#!/usr/bin/env bash
echo "repair: ran $(basename "$0") $* as NODE_NAME=$NODE_NAME"
"""


def _loop(tmp_path: Path, env: str, ticks: int = 2) -> list[str]:
    py = tmp_path / "aws-python"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    script = f"""
set -euo pipefail
export GPU_CLUSTER_STATE={tmp_path} GC_STEP=munge-responder
. {COMMON}
. {LIB / "repair.sh"}
REPAIR_PROGRAM=/opt/gpu-cluster/lib/repair.py NODE_NAME=ip-10-0-1-5 GPU_CLUSTER_AWS_PYTHON={py}
{env}
for _ in $(seq {ticks}); do repair_tick; done
"""
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return [line for line in (r.stdout + r.stderr).splitlines() if "repair" in line]


def test_runs_the_agent_with_the_boto3_interpreter_once_per_interval(tmp_path):
    lines = _loop(tmp_path, "REPAIR_POLICY=auto REPAIR_NOW=1800000000")
    assert len(lines) == 1, lines
    assert lines[0].endswith(
        "repair: ran aws-python /opt/gpu-cluster/lib/repair.py tick --now 1800000000 as NODE_NAME=ip-10-0-1-5"
    )


def test_policy_none_runs_nothing(tmp_path):
    assert _loop(tmp_path, "REPAIR_POLICY=none") == []


def test_without_the_boto3_interpreter_it_says_so_once_and_uses_python3(tmp_path):
    lines = _loop(tmp_path, f"REPAIR_POLICY=isolate REPAIR_INTERVAL=0 GPU_CLUSTER_AWS_PYTHON={tmp_path}/missing", 2)
    said = [line for line in lines if "is not installed (step 20)" in line]
    assert len(said) == 1, lines
    # python3 runs the (absent) program: the pass's failure is logged, the loop goes on
    assert sum("the agent's pass ended with exit" in line or "can't open file" in line for line in lines) >= 2, lines
