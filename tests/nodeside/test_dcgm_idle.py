"""Deep DCGM runs on idle nodes (nodeside/dcgm_idle.py), as timelines.

Slurm is a table (tests/support/repair_world.py's FakeSlurm, with reservations, batch
jobs, LastBusyTime and pending jobs added here), /fsx a temporary directory, time an
input. The node's half runs the real program with a fake `dcgmi` on PATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nodeside import dcgm_idle, repair
from tests.support.repair_world import HOUR, FakeSlurm

PROGRAM = Path(dcgm_idle.__file__)
NOW = 1_800_000_000
FAIL_OUT = "| Diagnostic | Result |\n| Memory | Pass |\n| Targeted Stress | Fail - GPU 3 |\n| PCIe | Fail |\n"


@dataclass
class DcgmSlurm(FakeSlurm):
    busy: dict[str, int | None] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)
    queue: dict[str, str] = field(default_factory=dict)  # job -> state
    reservations: dict[str, str] = field(default_factory=dict)  # name -> node
    refuse_reservation: str = ""
    next_job: int = 100

    def last_busy(self) -> dict[str, int | None]:
        return dict(self.busy)

    def waiting_for_nodes(self) -> list[str]:
        return list(self.pending)

    def job_state(self, job: str) -> str:
        return self.queue.get(job, "")

    def reserve(self, name: str, node: str, minutes: int) -> str:
        self.calls.append(f"reserve {name} {node} {minutes}")
        if self.refuse_reservation:
            return self.refuse_reservation
        self.reservations[name] = node
        n = self.nodes_[node]
        self.nodes_[node] = repair.Node(node, "reserved", n.reason, n.block)
        return ""

    def unreserve(self, name: str) -> str:
        self.calls.append(f"unreserve {name}")
        node = self.reservations.pop(name, None)
        if node and self.nodes_[node].state == "reserved":
            n = self.nodes_[node]
            self.nodes_[node] = repair.Node(node, "idle", n.reason, n.block)
        return ""

    def submit(self, reservation: str, node: str, minutes: int, output: str, command: str) -> tuple[str, str]:
        self.next_job += 1
        job = str(self.next_job)
        self.calls.append(f"sbatch {job} {reservation} {node} {minutes} {command}")
        self.queue[job] = "RUNNING"
        return job, ""

    def cancel(self, job: str) -> str:
        self.calls.append(f"scancel {job}")
        self.queue.pop(job, None)
        return ""

    def drain(self, node: str, reason: str) -> str:
        self.drain_calls = [*getattr(self, "drain_calls", []), (node, reason)]
        FakeSlurm.drain(self, node, reason)
        return ""


@pytest.fixture
def world(tmp_path):
    slurm = DcgmSlurm()
    for node in ("ctl", "n1", "n2"):
        slurm.add(node, block="a")
        slurm.busy[node] = NOW - 2 * HOUR
    return slurm, tmp_path / "fsx"


def settings(root: Path, **over) -> dcgm_idle.Settings:
    base = dict(
        level=2,
        every=24 * HOUR,
        idle=30 * 60,
        max_nodes=1,
        limit_minutes=20,
        fsx_root=str(root),
        health_records=str(root / "health"),
        program="/opt/gpu-cluster/lib/dcgm_idle.py",
    )
    return dcgm_idle.Settings(**{**base, **over})


def tick(slurm, s: dcgm_idle.Settings, now: int) -> dcgm_idle.Runs:
    runs = dcgm_idle.Runs(s, slurm, now, state=dcgm_idle.load_state(s))
    runs.tick()
    dcgm_idle.save(runs)
    return runs


def verdict(s: dcgm_idle.Settings, node: str, status: str, detail: str) -> None:
    state = dcgm_idle.load_state(s)
    path = Path(state["runs"][node]["result"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"node": node, "level": 2, "status": status, "detail": detail}))


def history(s: dcgm_idle.Settings) -> list[tuple[str, str]]:
    path = Path(s.dir) / "history.jsonl"
    return [(h["node"], h["action"]) for h in map(json.loads, path.read_text().splitlines())]


def test_an_idle_node_is_reserved_then_tested_inside_the_reservation(world):
    slurm, root = world
    s = settings(root)
    runs = tick(slurm, s, NOW)
    # the longest untested first (none tested yet: by name), one at a time (max_nodes 1)
    assert slurm.calls[:2] == [
        "reserve gpu-cluster-dcgm-ctl ctl 20",
        f"sbatch 101 gpu-cluster-dcgm-ctl ctl 20 python3 /opt/gpu-cluster/lib/dcgm_idle.py run --level 2 --out {root}/dcgm/results/ctl-{NOW}.json",
    ]
    assert runs.lines == ["dcgm: ctl: started: level 2, job 101 in reservation gpu-cluster-dcgm-ctl (bound 20 min)"]
    # nothing new while one runs
    tick(slurm, s, NOW + 60)
    assert len([c for c in slurm.calls if c.startswith("reserve")]) == 1
    verdict(s, "ctl", "pass", "every test passed (dcgmi diag)")
    tick(slurm, s, NOW + 600)
    assert "unreserve gpu-cluster-dcgm-ctl" in slurm.calls
    assert slurm.nodes_["ctl"].state == "idle" and not getattr(slurm, "drain_calls", [])
    # the next node's turn in the same pass; ctl not again until every_hours later
    assert slurm.calls[-1].startswith("sbatch 102 gpu-cluster-dcgm-n1 n1")
    assert history(s) == [("ctl", "started"), ("ctl", "pass"), ("n1", "started")]


def test_a_failed_test_drains_with_the_dcgm_prefix_the_repair_agent_treats_as_hardware(world):
    slurm, root = world
    s = settings(root)
    tick(slurm, s, NOW)
    status, detail = dcgm_idle.verdict(1, FAIL_OUT, "")
    verdict(s, "ctl", status, detail)
    tick(slurm, s, NOW + 600)
    reason = "gpu-cluster dcgm: level 2: Targeted Stress Fail - GPU 3 (+1 more) (dcgmi diag)"
    assert slurm.drain_calls == [("ctl", reason)]
    assert slurm.nodes_["ctl"].reason == reason
    assert repair.classify(reason, None) == repair.Fault("dcgm", "replace", reason)
    assert dcgm_idle.load_state(s)["last"]["ctl"]["status"] == "fail"


def test_a_node_drained_by_someone_else_meanwhile_keeps_that_reason(world):
    slurm, root = world
    s = settings(root)
    tick(slurm, s, NOW)
    FakeSlurm.drain(slurm, "ctl", "operator: cabling check")  # not the program's drain
    verdict(s, "ctl", "fail", "Memory Fail (dcgmi diag)")
    runs = tick(slurm, s, NOW + 600)
    assert not getattr(slurm, "drain_calls", [])
    assert slurm.nodes_["ctl"].reason == "operator: cabling check"
    assert "already drained by someone else: operator: cabling check" in runs.lines[0]


def test_a_run_yields_to_jobs_waiting_for_nodes_and_none_starts_meanwhile(world):
    slurm, root = world
    s = settings(root)
    tick(slurm, s, NOW)
    slurm.pending = ["77"]
    runs = tick(slurm, s, NOW + 60)
    assert slurm.calls[-2:] == ["scancel 101", "unreserve gpu-cluster-dcgm-ctl"]
    assert runs.lines == ["dcgm: ctl: yielded: job(s) 77 wait for nodes; job 101 cancelled"]
    tick(slurm, s, NOW + 120)
    assert not [c for c in slurm.calls if c.startswith("reserve")][1:]
    # a yielded node keeps its turn: it is the first once the queue is clear
    slurm.pending = []
    tick(slurm, s, NOW + 180)
    assert [c for c in slurm.calls if c.startswith("reserve")][1:] == ["reserve gpu-cluster-dcgm-ctl ctl 20"]


def test_a_run_without_a_verdict_frees_the_node_without_draining(world):
    slurm, root = world
    s = settings(root)
    tick(slurm, s, NOW)
    del slurm.queue["101"]  # the job left the queue (node rebooted, job failed)
    runs = tick(slurm, s, NOW + 60)
    assert runs.lines[0].startswith("dcgm: ctl: no-verdict: job 101 ended without a verdict (log ")
    tick(slurm, s, NOW + 120)
    # past the bound: cancelled
    runs = tick(slurm, s, NOW + 120 + 20 * 60 + dcgm_idle.GRACE + 1)
    assert "scancel 102" in slurm.calls and "ran past 20 min; cancelled" in runs.lines[0]
    assert not getattr(slurm, "drain_calls", [])


@pytest.mark.parametrize(
    ("what", "setup"),
    [
        ("busy recently", lambda sl, r: sl.busy.update(ctl=NOW - 60, n1=NOW - 60, n2=NOW - 60)),
        ("never busy (unknown)", lambda sl, r: sl.busy.update(ctl=None, n1=None, n2=None)),
        ("not idle", lambda sl, r: [FakeSlurm.drain(sl, n, "gpu-cluster health: x") for n in ("ctl", "n1", "n2")]),
        ("in the block's end window", lambda sl, r: _block_end(r, NOW + 3600)),
        ("reservation refused", lambda sl, r: setattr(sl, "refuse_reservation", "Requested nodes are busy")),
    ],
)
def test_no_run_starts_on_a_node_that_is_not_idle_enough(world, what, setup):
    slurm, root = world
    setup(slurm, root)
    tick(slurm, settings(root), NOW)
    assert not [c for c in slurm.calls if c.startswith("sbatch")], what


def _block_end(root: Path, end: int) -> None:
    import time

    (root / "blocks").mkdir(parents=True, exist_ok=True)
    (root / "blocks" / "a.end").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(end)) + "\n")


def test_a_node_whose_health_record_says_no_dcgmi_is_skipped_with_the_reason_once(world):
    slurm, root = world
    s = settings(root)
    (root / "health").mkdir(parents=True)
    for node in ("ctl", "n1", "n2"):
        (root / "health" / f"{node}.json").write_text(
            json.dumps({"checks": [{"check": "dcgm", "status": "skip", "detail": "dcgmi not installed"}]})
        )
    runs = tick(slurm, s, NOW)
    assert runs.lines == [
        f"dcgm: {n}: skip: dcgmi not installed (its health record); no deep diagnostic" for n in ("ctl", "n1", "n2")
    ]
    assert tick(slurm, s, NOW + 60).lines == [] and not slurm.calls


def test_every_hours_spaces_the_runs_on_one_node(world):
    slurm, root = world
    s = settings(root, max_nodes=3)
    tick(slurm, s, NOW)
    for node in ("ctl", "n1", "n2"):
        verdict(s, node, "pass", "ok")
    tick(slurm, s, NOW + 600)
    assert len([c for c in slurm.calls if c.startswith("sbatch")]) == 3
    tick(slurm, s, NOW + 23 * HOUR)
    assert len([c for c in slurm.calls if c.startswith("sbatch")]) == 3
    tick(slurm, s, NOW + 600 + 24 * HOUR)
    assert len([c for c in slurm.calls if c.startswith("sbatch")]) == 6


@pytest.mark.parametrize(
    ("rc", "out", "want"),
    [
        (0, "| Memory | Pass |\n| PCIe | Pass |\n", ("pass", "every test passed (dcgmi diag)")),
        (1, FAIL_OUT, ("fail", "Targeted Stress Fail - GPU 3 (+1 more) (dcgmi diag)")),
        (
            255,
            "Error: unable to connect to host engine\n",
            ("skip", "dcgmi diag exit 255: Error: unable to connect to host engine"),
        ),
        (None, "", ("skip", "dcgmi not installed")),
    ],
)
def test_the_verdict_of_one_dcgmi_run(rc, out, want):
    assert dcgm_idle.verdict(rc, out, "") == want


def _node_run(tmp_path: Path, dcgmi: str | None) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if dcgmi is not None:
        (bin_dir / "dcgmi").write_text(dcgmi)
        (bin_dir / "dcgmi").chmod(0o755)
    out = tmp_path / "fsx" / "results" / "n1-1.json"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "101"}
    r = subprocess.run(
        [sys.executable, str(PROGRAM), "run", "--level", "2", "--out", str(out)],
        env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def test_the_node_half_runs_dcgmi_at_the_level_and_writes_its_verdict(tmp_path):
    fake = f'#!/bin/bash\necho "$*" > {tmp_path}/args\nprintf "%s" "{FAIL_OUT}"\nexit 1\n'
    doc = _node_run(tmp_path, fake)
    assert (tmp_path / "args").read_text().strip() == "diag -r 2"
    assert (doc["node"], doc["job"], doc["level"], doc["status"]) == ("n1", "101", 2, "fail")
    assert doc["detail"] == "Targeted Stress Fail - GPU 3 (+1 more) (dcgmi diag)"


def test_the_node_half_without_dcgmi_says_so(tmp_path):
    assert _node_run(tmp_path, None)["status"] == "skip"
