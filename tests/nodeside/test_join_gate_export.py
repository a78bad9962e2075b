"""The join gate hands its job every newcomer, however many arrive together.

join_gate_start submits the validation job with the newcomer list (comma-separated
hostnames). sbatch's --export takes a comma-separated list of NAME or NAME=value
[SLURM-SBATCH], so a value holding commas cannot travel in it: the job would see the
first newcomer alone and the others would fall back to "ended without a report" and stay
drained (seen on the faithful lane, tests/daemons/test_controller_faithful.py, when the
next block's two nodes joined a dedicated controller). The stand-in below builds the
job's environment from --export as sbatch documents it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.support.block_end import COMMON, LIB

SBATCH = r"""#!/usr/bin/env python3
# sbatch stand-in: the job environment per --export [SLURM-SBATCH] (ALL: the caller's
# environment; NAME=value: that value; bare NAME: the caller's value), recorded.
import json, os, sys
env, export = {}, None
for a in sys.argv[1:]:
    if a.startswith("--export="):
        export = a[len("--export="):]
for item in (export or "ALL").split(","):
    if item == "ALL":
        env.update(os.environ)
    elif "=" in item:
        k, v = item.split("=", 1)
        env[k] = v
    elif item in os.environ:
        env[item] = os.environ[item]
job = {k: v for k, v in env.items() if k.startswith("VALIDATION_")}
with open(os.environ["SBATCH_RECORD"], "w") as f:
    json.dump({"argv": sys.argv[1:], "job_env": job}, f)
print("77")
"""


def _start(tmp_path: Path, newcomers: str) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(SBATCH)
    for name, body in (("scontrol", "exit 0"), ("sinfo", "exit 0")):  # reservations succeed; no partner in service
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
    for p in bin_dir.iterdir():
        p.chmod(0o755)
    (tmp_path / "fsx" / "validation" / "join").mkdir(parents=True)  # join_gate_open made it
    (tmp_path / "state").mkdir()
    record = tmp_path / "sbatch.json"
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "FSX_ROOT": str(tmp_path / "fsx"),
        "GPU_CLUSTER_HOME": str(tmp_path),
        "GPU_CLUSTER_STATE": str(tmp_path / "state"),
        "SLURM_PARTITION": "train",
        "VALIDATION_JOB": str(tmp_path / "first-boot.sbatch"),
        "VALIDATION_JOIN_TIMEOUT_MINUTES": "7",
        "JOIN_GATE_NOW": "1000",
        "GC_STEP": "agent",
        "SBATCH_RECORD": str(record),
    }
    script = f'set -euo pipefail; . "{COMMON}"; . "{LIB / "join-gate.sh"}"; join_gate_start "{newcomers}"'
    r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(record.read_text())
    got["run_env"] = (tmp_path / "fsx" / "validation" / "join" / "run.env").read_text()
    return got


def test_every_newcomer_reaches_the_gate_job_when_several_join_together(tmp_path):
    got = _start(tmp_path, "ip-10-0-0-14,ip-10-0-0-15")
    assert got["job_env"] == {
        "VALIDATION_NEWCOMERS": "ip-10-0-0-14,ip-10-0-0-15",
        "VALIDATION_PARTNER": "",
        "VALIDATION_TIME_LIMIT_MINUTES": "7",
        "VALIDATION_JOB": str(tmp_path / "first-boot.sbatch"),
        "VALIDATION_JOIN_TIMEOUT_MINUTES": "7",
    }
    assert "-w" in got["argv"] and "ip-10-0-0-14,ip-10-0-0-15" in got["argv"]
    assert "JOIN_NEWCOMERS='ip-10-0-0-14,ip-10-0-0-15'" in got["run_env"]
    assert os.path.basename(got["argv"][-1]) == "first-boot.sbatch"


def test_a_single_newcomer_still_reaches_the_gate_job(tmp_path):
    assert _start(tmp_path, "ip-10-0-0-14")["job_env"]["VALIDATION_NEWCOMERS"] == "ip-10-0-0-14"
