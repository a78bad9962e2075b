"""A join-gate run whose nodes are gone ends at the next tick (nodeside/lib/join-gate.sh).

Before, the run held its reservation until its bound (validation.join_timeout_minutes,
30 by default): with JobRequeue=1 slurmctld requeued the gate job when its newcomer
went down and the job waited for it; the reservation kept the reaper from deleting the
node (slurmctld refuses to delete a reserved node); every later newcomer stayed drained.
Seen on the namespace lane when a test's clean-up destroyed a newcomer mid-run.

"Gone" as slurmctld shows it: not listed (deleted), or base state DOWN (slurmd silent
for SlurmdTimeout: a terminated, stopped or crashed instance; or set down by an
operator). One missed ping (NOT_RESPONDING on a live state) is not gone. The Slurm
commands are tests/support/fake_slurmctld.py (its rules measured against a real
slurmctld); tests/daemons/test_join_gate_slurm.py plays the same against one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fake_slurmctld import FakeSlurmctld
from tests.support.join_gate import agent_env, history, make_home, run_agent

NEW, NEW2, OLD = "ip-10-0-0-14", "ip-10-0-0-15", "ip-10-0-0-9"
PENDING = "gpu-cluster join gate: pending"


class Agent:
    """The controller's agent loop, one tick at a time, against the fake slurmctld."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.slurm = FakeSlurmctld(tmp_path / "slurm")
        make_home(tmp_path)
        self.fsx = tmp_path / "fsx"
        (self.fsx / "validation" / "join").mkdir()  # join_gate_open made it
        (self.fsx / "validation" / "join" / "open").write_text("2026-01-05T09:00:00Z\n")
        env = agent_env(tmp_path, timeout_minutes=30)
        self.env = {**env, **self.slurm.env, "PATH": f"{self.slurm.bin}:{env['PATH']}", "HOME": str(tmp_path)}
        self.now = 1000

    def sh(self, script: str, **env: str) -> str:
        return run_agent(script, {**self.env, **env}, self.now)

    def tick(self, **env: str) -> str:
        self.now += 30
        return self.sh("join_gate_tick", **env)

    def start_run(self) -> str:
        """Two ticks: the newcomers are named pending, then (settle 0) the run starts."""
        self.tick()
        out = self.tick()
        assert "join gate: job " in out, out
        return self.run_env()["JOIN_JOB"]

    def run_env(self) -> dict[str, str]:
        text = (self.fsx / "validation" / "join" / "run.env").read_text()
        return {k: v.strip("'") for k, v in (ln.split("=", 1) for ln in text.splitlines())}

    def running(self) -> bool:
        return (self.fsx / "validation" / "join" / "run.env").exists()

    def history(self) -> list[str]:
        return history(self.tmp)

    def report(self, job: str, newcomers: list[str]) -> None:
        """What the gate job leaves when it judged the newcomers (all GO)."""
        run = self.fsx / "validation" / f"20260105T100000Z-{job}"
        run.mkdir()
        (run / "report.json").write_text(json.dumps({"join": {"newcomers": newcomers}, "blamed_nodes": {}}))


@pytest.fixture
def agent(tmp_path):
    a = Agent(tmp_path)
    a.slurm.register(OLD)  # in service: the partner
    return a


def test_a_run_whose_newcomer_went_down_ends_at_the_next_tick_and_the_next_newcomer_is_gated(agent):
    agent.slurm.register(NEW, drain=True)
    job = agent.start_run()
    resv = agent.run_env()["JOIN_RESV"]
    assert agent.slurm.state()["resv"][resv]["nodes"] == [NEW, OLD]
    # The instance is terminated: SlurmdTimeout later slurmctld marks it down; the job
    # is requeued to wait for it (JobRequeue=1: what held the run before).
    agent.slurm.stop_answering(NEW, requeue=True)
    # While the reservation holds it, the reaper cannot delete it (slurmctld refuses).
    assert "could not delete stale node ip-10-0-0-14" in agent.sh(f'reap_stale_nodes 0 "{PENDING}"')
    agent.tick()
    assert not agent.running()
    st = agent.slurm.state()
    assert st["resv"] == {} and st["jobs"][job]["state"] == "CANCELLED"
    assert agent.history()[-1] == (
        f"join gate: {NEW} is gone (down: Not responding); run {resv} ended, job {job} cancelled; drained, so it "
        "is gated again if it answers"
    )
    # Drained with a pending reason while down: it shows drained*, so no tick takes it as a
    # newcomer while it is silent, and the reaper may now delete it.
    assert agent.slurm.sinfo()[NEW] == ("drained*", f"{PENDING} (down during its join run: Not responding)")
    assert agent.sh(f'reap_stale_nodes 0 "{PENDING}"').startswith(f"deleted stale node {NEW} (down, not responding")
    assert NEW not in agent.slurm.sinfo()
    # A later newcomer starts its own run at once, against the partner.
    agent.slurm.register(NEW2, drain=True)
    job2 = agent.start_run()
    assert job2 != job and agent.run_env()["JOIN_NEWCOMERS"] == NEW2
    agent.report(job2, [NEW2])
    agent.slurm.end_job(job2)
    agent.tick()
    assert agent.history()[-1] == f"join gate: {NEW2} passed (job {job2}); it takes jobs"
    assert agent.slurm.sinfo()[NEW2] == ("idle", "none")


def test_a_gone_newcomer_that_answers_again_is_gated_again(agent):
    """A crashed node that reboots: ReturnToService=2 returns it, with our drain kept."""
    agent.slurm.register(NEW, drain=True)
    job = agent.start_run()
    agent.slurm.stop_answering(NEW)  # the job ends with the node (--no-requeue), no report
    agent.tick()
    assert "is gone (down: Not responding)" in agent.history()[-1]
    assert not any("stays drained" in h for h in agent.history()), "a gone node is not a gate failure"
    agent.slurm.answer_again(NEW)
    assert agent.slurm.sinfo()[NEW] == ("drained", f"{PENDING} (down during its join run: Not responding)")
    job2 = agent.start_run()
    assert job2 != job and agent.run_env()["JOIN_NEWCOMERS"] == NEW


def test_a_newcomer_removed_from_slurm_ends_its_run(agent):
    agent.slurm.register(NEW, drain=True)
    job = agent.start_run()
    resv = agent.run_env()["JOIN_RESV"]
    agent.slurm.delete(NEW)  # e.g. an operator removed the reservation and the node
    agent.tick()
    assert not agent.running() and agent.slurm.state()["resv"] == {}
    assert (
        agent.history()[-1] == f"join gate: {NEW} is gone (removed from Slurm); run {resv} ended, job {job} cancelled"
    )


def test_a_newcomer_still_there_waits_for_a_new_run_when_another_is_gone(agent):
    agent.slurm.register(NEW, drain=True)
    agent.slurm.register(NEW2, drain=True)
    job = agent.start_run()
    resv = agent.run_env()["JOIN_RESV"]
    agent.slurm.stop_answering(NEW2)
    agent.tick()
    assert agent.history()[-2:] == [
        f"join gate: {NEW} waits for a new run (run {resv} ended: {NEW2} gone)",
        f"join gate: {NEW2} is gone (down: Not responding); run {resv} ended, job {job} cancelled; drained, so it "
        "is gated again if it answers",
    ]
    # drained before the reservation went: never unreserved and undrained
    calls = [c for c in agent.slurm.calls("scontrol") if c[0] in ("update", "delete")]
    assert calls.index(
        ["update", f"nodename={NEW}", "state=drain", f"reason={PENDING} (its join run ended: {NEW2} gone)"]
    ) < (calls.index(["delete", f"reservationname={resv}"]))
    job2 = agent.start_run()
    assert job2 != job and agent.run_env()["JOIN_NEWCOMERS"] == NEW


def test_a_partner_gone_puts_the_newcomers_back_to_pending(agent):
    agent.slurm.register(NEW, drain=True)
    job = agent.start_run()
    resv = agent.run_env()["JOIN_RESV"]
    agent.slurm.stop_answering(OLD)
    agent.tick()
    assert agent.history()[-2:] == [
        f"join gate: {NEW} waits for a new run (run {resv} ended: {OLD} gone)",
        f"join gate: partner {OLD} is gone (down: Not responding); run {resv} ended, job {job} cancelled",
    ]
    assert agent.slurm.sinfo()[OLD] == ("down*", "Not responding")  # not ours: left to the reaper's rule


@pytest.mark.parametrize("what", ["missed ping", "slurmctld unreachable", "finished with a report"])
def test_nothing_gone_or_nothing_known_keeps_the_run(agent, what):
    agent.slurm.register(NEW, drain=True)
    job = agent.start_run()
    resv = agent.run_env()["JOIN_RESV"]
    env = {}
    if what == "missed ping":
        agent.slurm.miss_a_ping(NEW)  # a loaded node: NOT_RESPONDING on a live state
    elif what == "slurmctld unreachable":
        env = {"FAKE_SLURM_DOWN": "1"}
    else:
        agent.report(job, [NEW])
        agent.slurm.end_job(job)
        agent.slurm.stop_answering(NEW)  # it went down after the gate judged it
    agent.tick(**env)
    if what == "finished with a report":
        assert agent.history()[-1] == f"join gate: {NEW} passed (job {job}); it takes jobs"
        assert not agent.running()
    else:
        assert agent.running() and agent.run_env()["JOIN_JOB"] == job
        assert resv in agent.slurm.state()["resv"]
