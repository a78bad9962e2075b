"""Step 50's PMIx run check (nodeside/lib/node-pmix.sh) by the node's Slurm state, with a
fake `scontrol`, `squeue` and `scancel` and a fake lib/check-pmix.sh (which records that
the step was tried).

The case that matters: after a controller replacement the munge responder re-runs step
50 on every worker, and workers run jobs then. A check step cannot start on a busy node
within --immediate; failing step 50 for it kept the boot lock through its retries (so
the node never recorded the new controller) and would have had the node drained."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from userdata import layout
from userdata.render import boot_files

CHECK = """#!/bin/bash
echo "$*" >>"$CALLS"
if [[ -s $STATE_AFTER ]]; then sed -i "s/State=[^ ]*/State=$(cat "$STATE_AFTER")/" "$NODE_INFO"; fi
echo "srun: error: Unable to allocate resources: Requested nodes are busy"
exit "$(cat "$CHECK_RC" 2>/dev/null || echo 0)"
"""

# `scontrol show topology` (with or without a node) as Slurm's tree plugin answers it: every switch, or the
# switches above NODE (none, and an error line, for a node under no switch). NODE is
# placed once it has been asked about PLACED_AFTER times (the agent's refresh).
SCONTROL = """#!/bin/bash
if [[ $1 == show && $2 == topology ]]; then
  if [[ -z ${3:-} ]]; then cat "$TOPO_ALL"; exit 0; fi
  echo "$3" >>"$TOPO_ASKED"
  if (( $(wc -l <"$TOPO_ASKED") > ${PLACED_AFTER:-0} )); then grep "$3" "$TOPO_ALL"; exit 0; fi
  echo "scontrol: error: Topology information contains no switch or node named $3" >&2
  exit 0
fi
cat "$NODE_INFO"
"""
# squeue lists what LEFTOVER holds (the check's job srun left behind), when asked with the
# filters the check uses; scancel records its arguments and frees the node.
SQUEUE = """#!/bin/bash
[[ "$*" == "-h -n gpu-cluster-pmix-check -w n1 -t pending,running,configuring,suspended -o %i %T" ]] || exit 1
cat "$LEFTOVER" 2>/dev/null || true
"""
SCANCEL = """#!/bin/bash
echo "$*" >>"$CANCELS"
sed -i "s/State=[^ ]*/State=IDLE/" "$NODE_INFO"
"""
SWITCHES = "SwitchName=nn-leaf1 Level=0 LinkSpeed=1 Nodes=n1\nSwitchName=nn-top Level=1 LinkSpeed=1 Switches=nn-leaf1\n"
TREE = {"TOPOLOGY_PLUGIN": "topology/tree"}
CHECK_ARGS = "-N1 -w n1 --immediate=60 --job-name=gpu-cluster-pmix-check --time=2"


def run_check(
    tmp_path: Path,
    state: str,
    check_rc: int = 0,
    state_after: str = "",
    topology: dict[str, str] | None = None,
    switches: str = SWITCHES,
    leftover: str = "",
) -> tuple[subprocess.CompletedProcess, list[str], str]:
    files = boot_files()
    (tmp_path / "lib").mkdir(exist_ok=True)
    for name in ("common.sh", "topology.sh", "node-pmix.sh"):
        (tmp_path / name).write_text(files[f"{layout.LIB}/{name}"])
    (tmp_path / "lib" / "check-pmix.sh").write_text(CHECK)
    (tmp_path / "lib" / "check-pmix.sh").chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("scontrol", SCONTROL), ("squeue", SQUEUE), ("scancel", SCANCEL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    if leftover:
        (tmp_path / "leftover").write_text(leftover)
    (tmp_path / "node").write_text(
        f"NodeName=n1 Arch=x86_64 CoresPerSocket=2\n   State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1\n"
    )
    (tmp_path / "rc").write_text(str(check_rc))
    (tmp_path / "state_after").write_text(state_after)
    (tmp_path / "topology").write_text(switches)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "GPU_CLUSTER_HOME": str(tmp_path),
        "GPU_CLUSTER_STATE": str(tmp_path),
        "GPU_CLUSTER_RUN": str(tmp_path),
        "GPU_CLUSTER_PACKAGES": "install",
        "GC_STEP": "50-slurm",
        "GC_NOTES_FILE": str(tmp_path / "notes"),
        "NODE_NAME": "n1",
        "NODE_INFO": str(tmp_path / "node"),
        "CALLS": str(tmp_path / "calls"),
        "CHECK_RC": str(tmp_path / "rc"),
        "STATE_AFTER": str(tmp_path / "state_after"),
        "TOPO_ALL": str(tmp_path / "topology"),
        "TOPO_ASKED": str(tmp_path / "topology_asked"),
        "LEFTOVER": str(tmp_path / "leftover"),
        "CANCELS": str(tmp_path / "cancels"),
        "GC_WAIT_FIRST": "0.01",
        "GC_WAIT_INTERVAL": "0.01",
        **(topology or {}),
    }
    r = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; . {tmp_path}/common.sh; . {tmp_path}/topology.sh; . {tmp_path}/node-pmix.sh; pmix_check"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    notes = (tmp_path / "notes").read_text() if (tmp_path / "notes").exists() else ""
    return r, calls, notes


@pytest.mark.parametrize("state", ["ALLOCATED", "MIXED", "IDLE+COMPLETING", "ALLOCATED+DYNAMIC_NORM", "MIXED+PLANNED"])
def test_a_node_that_runs_jobs_skips_the_check_and_says_so(tmp_path, state):
    r, calls, notes = run_check(tmp_path, state, check_rc=1)
    assert (r.returncode, calls) == (0, []), r.stdout + r.stderr
    assert f"n1 runs jobs, State={state}: no room for the check's step; the validation gate runs it" in r.stdout
    assert notes.startswith("50-slurm: skipped: PMIx run check (n1 runs jobs")


def test_a_drained_node_skips_the_check(tmp_path):
    r, calls, notes = run_check(tmp_path, "IDLE+DRAIN+DYNAMIC_NORM", check_rc=1)
    assert (r.returncode, calls) == (0, []), r.stdout + r.stderr
    assert "n1 is drained; the validation gate runs it" in notes


@pytest.mark.parametrize("state", ["IDLE", "IDLE+DYNAMIC_NORM", "IDLE+PLANNED"])
def test_a_free_node_runs_the_check_and_its_failure_fails_the_step(tmp_path, state):
    r, calls, _ = run_check(tmp_path, state)
    assert (r.returncode, calls) == (0, [CHECK_ARGS]), r.stdout + r.stderr
    assert "PMIx: a two-task srun --mpi=pmix step ran on n1" in r.stdout
    r, calls, _ = run_check(tmp_path, state, check_rc=1)
    assert r.returncode == 1 and len(calls) == 2, r.stdout + r.stderr


@pytest.mark.parametrize("after", ["ALLOCATED", "MIXED+PLANNED", "IDLE+COMPLETING", "IDLE+DRAIN"])
def test_a_node_the_gate_takes_while_the_check_waits_skips_it(tmp_path, after):
    # The CI lane's doubled step 50: the worker registered (idle), the controller's step 95
    # submitted the gate across both idle nodes, and the worker's check then ran out of
    # --immediate while the gate held it; the step failed and was retried.
    r, calls, notes = run_check(tmp_path, "IDLE", check_rc=1, state_after=after)
    assert (r.returncode, len(calls)) == (0, 1), r.stdout + r.stderr
    assert notes.startswith(f"50-slurm: skipped: PMIx run check (n1 was taken while the check waited, State={after};")
    assert "srun said: srun: error: Unable to allocate resources: Requested nodes are busy" in notes


def test_a_check_that_fails_on_a_node_still_free_fails_the_step(tmp_path):
    r, calls, notes = run_check(tmp_path, "IDLE", check_rc=1, state_after="IDLE+PLANNED")
    assert (r.returncode, len(calls)) == (1, 1), r.stdout + r.stderr
    assert "Requested nodes are busy" in r.stdout + r.stderr and notes == ""


def test_with_a_topology_the_check_waits_until_the_controller_places_the_node(tmp_path):
    # The CI lane's doubled step 50, second cause: a node that just registered is under no
    # switch, and Slurm refused the check's step ("Requested node configuration is not
    # available") until the controller's agent refreshed topology.conf.
    r, calls, notes = run_check(tmp_path, "IDLE", topology={**TREE, "PLACED_AFTER": "3"})
    assert (r.returncode, calls, notes) == (0, [CHECK_ARGS], ""), r.stdout + r.stderr
    assert (tmp_path / "topology_asked").read_text().splitlines() == ["n1"] * 4
    assert "done waiting after" in r.stdout and "n1 under a switch in Slurm's topology" in r.stdout


def test_a_node_still_unplaced_at_the_bound_leaves_the_check_to_the_gate(tmp_path):
    r, calls, notes = run_check(
        tmp_path, "IDLE", check_rc=1, topology={**TREE, "PLACED_AFTER": "1000", "PMIX_TOPOLOGY_WAIT": "0"}
    )
    assert (r.returncode, calls) == (0, []), r.stdout + r.stderr
    assert notes.startswith("50-slurm: skipped: PMIx run check (n1 is under no switch in Slurm's topology after 0s")


def test_a_topology_without_switches_places_every_node(tmp_path):
    # The template's topology.conf before the controller's first refresh: no switch, and
    # Slurm places jobs as if no topology were loaded.
    r, calls, _ = run_check(tmp_path, "IDLE", topology={**TREE, "PLACED_AFTER": "1000"}, switches="")
    assert (r.returncode, calls) == (0, [CHECK_ARGS]), r.stdout + r.stderr
    assert not (tmp_path / "topology_asked").exists()


def test_the_check_is_a_short_named_job_and_a_job_srun_left_behind_is_cancelled_and_said(tmp_path):
    # A job srun leaves (killed with its shepherd by the check's timeout after the allocation
    # was granted, or a completion slurmctld never got) holds the node until its time limit,
    # the partition's 60 min, and the controller's hand-off waits for that node in vain.
    r, calls, _ = run_check(tmp_path, "IDLE", leftover="41 RUNNING\n")
    assert (r.returncode, calls) == (0, [CHECK_ARGS]), r.stdout + r.stderr
    assert (tmp_path / "cancels").read_text().splitlines() == ["-n gpu-cluster-pmix-check -w n1"]
    assert "WARNING: srun left the PMIx check's job on n1 (41 RUNNING); cancelling it" in r.stdout
    assert "PMIx: a two-task srun --mpi=pmix step ran on n1" in r.stdout


def test_a_failed_check_cancels_its_leftover_before_it_reads_the_nodes_state(tmp_path):
    # srun killed by the check's timeout: the job it leaves makes the node ALLOCATED, which
    # would read as "taken by the gate" and skip; cancelled first, the failure is the step's.
    r, calls, notes = run_check(tmp_path, "IDLE", check_rc=1, state_after="ALLOCATED", leftover="42 RUNNING\n")
    assert (r.returncode, len(calls)) == (1, 1), r.stdout + r.stderr
    assert (tmp_path / "cancels").read_text().splitlines() == ["-n gpu-cluster-pmix-check -w n1"]
    assert "srun left the PMIx check's job on n1 (42 RUNNING)" in r.stdout + r.stderr and notes == ""


def test_a_check_that_leaves_nothing_cancels_nothing(tmp_path):
    r, calls, _ = run_check(tmp_path, "IDLE")
    assert (r.returncode, calls) == (0, [CHECK_ARGS]), r.stdout + r.stderr
    assert not (tmp_path / "cancels").exists() and "srun left" not in r.stdout
