"""Step 95's submission of the first-boot gate (nodeside/steps/95-handoff.sh), run as
shipped against a fake `sinfo`, `sbatch` and `squeue`.

The faithful lane's CI run caught a one-node gate on a two-node cluster: the wait saw both
nodes idle, then a worker's own PMIx check step (step 50) held its node for a second, and
a recount of idle nodes sent the gate out on one node, where its two-task PMIx step could
not fit. The gate asks for the nodes that were idle when the wait passed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

NODESIDE = Path(__file__).resolve().parents[2] / "nodeside"

# idle counts, one per call: both nodes idle at the wait, then one busy with its check
SINFO = """#!/bin/bash
n=$(head -n 1 "$IDLE_SEQ"); tail -n +2 "$IDLE_SEQ" >"$IDLE_SEQ.next"
if [[ -s $IDLE_SEQ.next ]]; then mv "$IDLE_SEQ.next" "$IDLE_SEQ"; else rm -f "$IDLE_SEQ.next"; fi
echo "$n"
"""
SBATCH = """#!/bin/bash
echo "$*" >>"$SBATCH_CALLS"
echo 42
"""
# no job holds any node unless a test says which
SQUEUE_NONE = "#!/bin/bash\n"


def _step95(
    tmp_path, sinfo: str, idle: str, wait_minutes: str, squeue: str = SQUEUE_NONE
) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """Step 95 as shipped, against the fake sinfo/sbatch/squeue; (result, job file, fsx root)."""
    home, state, fsx_root, bin_dir = (tmp_path / d for d in ("opt", "state", "fsx", "bin"))
    for d in (home / "lib", home / "steps", state, fsx_root, bin_dir):
        d.mkdir(parents=True)
    for name in ("common.sh", "join-gate.sh", "boot-failures.sh", "topology.sh"):
        (home / "lib" / name).write_text((NODESIDE / "lib" / name).read_text())
    (state / "identity.env").write_text("NODE_ROLE=controller\nNODE_NAME=n1\n")
    job = tmp_path / "first-boot.sbatch"
    job.write_text("#!/bin/bash\n")
    for name, body in (("sinfo", sinfo), ("sbatch", SBATCH), ("squeue", squeue)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "idle").write_text(idle)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "GPU_CLUSTER_HOME": str(home),
        "GPU_CLUSTER_STATE": str(state),
        "FSX_ROOT": str(fsx_root),
        "GC_STEP": "95-handoff",
        "GC_WAIT_FIRST": "0.01",
        "GC_WAIT_INTERVAL": "0.01",
        "SLURM_PARTITION": "train",
        "GPU_CLUSTER_NODES": "2",
        "VALIDATION_ENABLED": "1",
        "VALIDATION_JOB": str(job),
        "VALIDATION_WAIT_MINUTES": wait_minutes,
        "IDLE_SEQ": str(tmp_path / "idle"),
        "SBATCH_CALLS": str(tmp_path / "sbatch"),
    }
    r = subprocess.run(
        ["bash", str(NODESIDE / "steps" / "95-handoff.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    return r, job, fsx_root


def test_the_gate_asks_for_the_nodes_idle_when_the_wait_passed(tmp_path):
    r, job, fsx_root = _step95(tmp_path, SINFO, "2\n1\n1\n", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "sbatch").read_text() == f"--parsable -N 2 {job}\n"
    assert (fsx_root / "validation" / "first-boot.jobid").read_text() == "42\n"


# the per-node listing answers the timed-out step's question: which node held the wait, and why
SINFO_NODES = """#!/bin/bash
if [[ " $* " == *" -N "* ]]; then
  printf '%s\\n' 'n1|idle|none' 'n2|drained|gpu-cluster health: clock reference 127.0.0.1:123 did not answer' 'n3|down*|Not responding'
else
  echo 1
fi
"""


def test_a_timed_out_wait_names_each_node_that_is_not_idle_with_its_state_and_reason(tmp_path):
    r, _, fsx_root = _step95(tmp_path, SINFO_NODES, "", "0")
    assert r.returncode != 0
    assert (
        "timed out after 0s waiting for 2 idle node(s) in partition train (sinfo): 1 idle; not idle: "
        "n2 drained (gpu-cluster health: clock reference 127.0.0.1:123 did not answer); n3 down* (Not responding)"
    ) in r.stdout + r.stderr
    assert not (fsx_root / "validation" / "first-boot.jobid").exists()
    assert not (tmp_path / "sbatch").exists()


# A CI run's controller waited 600 s with itself "allocated" and nothing said by what: the
# listing names the jobs that hold a node that is not idle.
SINFO_ALLOCATED = """#!/bin/bash
if [[ " $* " == *" -N "* ]]; then
  printf '%s\\n' 'n1|allocated|none' 'n2|idle|none'
else
  echo 1
fi
"""
SQUEUE_ON_N1 = """#!/bin/bash
[[ " $* " == *" -w n1 "* ]] && printf '%s\\n' '7 gpu-cluster-dcgm root 10:02' '9 train alice 0:31'
exit 0
"""


def test_a_timed_out_wait_names_the_jobs_that_hold_a_node(tmp_path):
    r, _, _ = _step95(tmp_path, SINFO_ALLOCATED, "", "0", squeue=SQUEUE_ON_N1)
    assert r.returncode != 0
    assert (
        "1 idle; not idle: n1 allocated [jobs: 7 gpu-cluster-dcgm root 10:02, 9 train alice 0:31]\n"
        in r.stdout + r.stderr
    )
