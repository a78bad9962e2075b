"""A small world for nodeside/repair.py: Slurm as a table of nodes and jobs, /fsx as a
temporary directory (boot markers, health records, block ends), and a clock.

`FakeSlurm` has the methods of repair.Slurm; every change it is asked for is applied to
the table (a drain reason renamed, a job requeued, a node deleted) and logged in
`calls`, so a test plays several passes as a timeline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from nodeside import repair

HOUR = 3600


@dataclass
class FakeSlurm:
    nodes_: dict[str, repair.Node] = field(default_factory=dict)
    jobs_: dict[str, list[str]] = field(default_factory=dict)  # node -> running job ids
    not_requeueable: set[str] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)
    answering: bool = True

    def add(self, name: str, state: str = "idle", reason: str = "", block: str = "a") -> None:
        self.nodes_[name] = repair.Node(name, state, reason, block)

    def drain(self, name: str, reason: str) -> None:
        n = self.nodes_[name]
        state = "draining" if self.jobs_.get(name) else "drained"
        self.nodes_[name] = repair.Node(name, state, reason, n.block)

    def gone(self, name: str) -> None:
        """The instance was terminated: slurmctld shows the node not responding."""
        n = self.nodes_[name]
        self.nodes_[name] = repair.Node(name, n.state.rstrip("*") + "*", n.reason, n.block)

    def nodes(self) -> dict[str, repair.Node] | None:
        return dict(self.nodes_) if self.answering else None

    def jobs(self, node: str) -> list[str]:
        return list(self.jobs_.get(node, []))

    def requeue(self, job: str) -> str:
        self.calls.append(f"requeue {job}")
        if job in self.not_requeueable:
            return "Requested operation is presently disabled for job " + job
        for node, jobs in self.jobs_.items():
            if job in jobs:
                jobs.remove(job)
                if not jobs and self.nodes_[node].state == "draining":
                    n = self.nodes_[node]
                    self.nodes_[node] = repair.Node(node, "drained", n.reason, n.block)
        return ""

    def set_reason(self, node: str, reason: str) -> str:
        self.calls.append(f"reason {node} {reason}")
        n = self.nodes_[node]
        self.nodes_[node] = repair.Node(node, n.state, reason[: repair.REASON_MAX], n.block)
        return ""

    def delete(self, node: str) -> str:
        self.calls.append(f"delete {node}")
        del self.nodes_[node]
        return ""


@dataclass
class World:
    root: Path
    slurm: FakeSlurm
    now: int = 1_800_000_000
    terminated: list[str] = field(default_factory=list)
    refuse: Exception | None = None  # what the next terminate raises, once

    def settings(self, **over) -> repair.Settings:
        base = dict(
            policy="auto",
            max_per_hour=2,
            max_out=2,
            repeat_window=24 * HOUR,
            reset_grace=30 * 60,
            job_grace=5 * 60,
            fsx_root=str(self.root),
            health_records=str(self.root / "health"),
            self_node="ctl",
        )
        return repair.Settings(**{**base, **over})

    def marker(self, node: str, instance_id: str) -> None:
        d = self.root / "status"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{node}.json").write_text(json.dumps({"node": node, "instance_id": instance_id, "state": "ok"}))

    def health(self, node: str, *failed: tuple[str, str, str]) -> None:
        """The health program's record: (check, detail, action) per failed check."""
        d = self.root / "health"
        d.mkdir(parents=True, exist_ok=True)
        checks = [{"check": c, "status": "fail", "detail": det, "action": act} for c, det, act in failed]
        checks.append({"check": "munge", "status": "ok", "detail": "munge -n | unmunge"})
        (d / f"{node}.json").write_text(json.dumps({"node": node, "state": "unhealthy", "checks": checks}))

    def block_end(self, block: str, iso: str) -> None:
        d = self.root / "blocks"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{block}.end").write_text(iso + "\n")

    def fake_terminate(self, asg, instance_id: str) -> dict:
        if self.refuse is not None:
            err, self.refuse = self.refuse, None
            raise err
        self.terminated.append(instance_id)
        return {"AutoScalingGroupName": "gpu-cluster-demo-a", "ActivityId": "act-1"}

    def tick(self, settings: repair.Settings, state: dict | None = None) -> repair.Agent:
        """One pass at `now`, its state saved and loaded as the agent loop would."""
        agent = repair.Agent(settings, self.slurm, self.now, asg=object(), state=repair.load_state(settings))
        agent.tick()
        repair.save(agent)
        return agent
