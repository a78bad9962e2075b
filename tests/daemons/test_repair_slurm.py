"""The repair agent against a real slurmctld and slurmd (Debian's Slurm), with its AWS call
going over HTTP through the model-checked stand-in (localcluster/aws_standin.py with the
lanes' Auto Scaling handlers).

One node (this host, feature block-a). The health program (nodeside/health.py, tools faked
as in tests/support/health_node.py, Slurm's own sinfo/scontrol real) drains it for a GPU
count while a `--requeue` batch job runs there. The agent (nodeside/repair.py with its real
Slurm clients) reads that drain through the real sinfo, waits out the job grace, requeues
the job with the real `scontrol requeue`, sees the node empty through the real squeue,
terminates the node's instance through its group (without decrementing), and renames the
drain in the real slurmctld. An operator's drain on the same node is never acted on.
"""

from __future__ import annotations

import os

import boto3
import pytest

from localcluster import asg_standin
from localcluster.aws_standin import AwsStandin
from nodeside import aws_client, repair
from tests.support.health_node import make_node
from tests.support.repair_world import World
from tests.support.slurm_harness import (
    SlurmLayout,
    host_short_name,
    missing_prerequisites,
    parse_node_line,
    start_host_cluster,
    wait_for,
)

_why = missing_prerequisites()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_why is not None, reason=_why or "")]
IID = "i-0123456789abcdef0"


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    layout = SlurmLayout(tmp_path / "slurm")
    c = start_host_cluster(layout, "repair")
    monkeypatch.setenv("SLURM_CONF", str(layout.conf))  # the agent's own Slurm clients find it
    state = tmp_path / "aws"
    standin = AwsStandin(asg_standin.handlers(state), state).start()
    asg_standin.add_instance(state, "gpu-cluster-repair-a", IID)
    monkeypatch.setenv("AWS_ENDPOINT_URL_AUTO_SCALING", standin.url)
    session = boto3.session.Session(aws_access_key_id="lane", aws_secret_access_key="lane")
    asg = aws_client.client("autoscaling", region="us-east-2", session=session)
    yield c, standin, asg
    c.run("scancel", "--user=root", check=False)
    c.stop()
    standin.stop()


def _node(c) -> dict[str, str]:
    out = c.run("scontrol", "-o", "show", "node", host_short_name()).stdout
    fields = parse_node_line(out)
    fields["Reason"] = out.split("Reason=", 1)[1].rsplit(" [", 1)[0].strip() if "Reason=" in out else ""
    return fields


def test_the_agent_requeues_the_job_replaces_the_node_and_renames_the_drain(cluster, tmp_path):
    c, standin, asg = cluster
    me = host_short_name()
    # a --requeue job on the node
    job = c.run("sbatch", "--parsable", "--requeue", "-N1", "--time=10", "-o", "/dev/null", "--wrap", "sleep 300")
    job_id = job.stdout.strip().split(";")[0]
    wait_for(lambda: c.run("squeue", "-h", "-j", job_id, "-o", "%T").stdout.strip() == "RUNNING", 60, "the job to run")

    # the health program drains it: 7 of 8 GPUs (real scontrol, real slurmctld)
    health = make_node(tmp_path / "node")
    try:
        for real in ("sinfo", "scontrol"):
            (health.root / "bin" / real).unlink()
        health.env = {**health.env, "SLURMD_NODENAME": me, "SLURM_CONF": os.environ["SLURM_CONF"]}
        health.set("gpus", "7")
        out = health.run(path=f"{health.root / 'bin'}:/usr/bin:/bin")
    finally:
        health.stop()
    assert out["slurm"]["action"] == "drain" and out["slurm"]["ok"], out
    assert _node(c)["Reason"] == "gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)"

    w = World(tmp_path / "fsx", slurm=None)
    w.marker(me, IID)
    (w.root / "health").mkdir(parents=True, exist_ok=True)
    (w.root / "health" / f"{me}.json").write_text((health.records / f"{me}.json").read_text())
    s = w.settings(policy="auto", job_grace=60, self_node="the-controller")

    def tick() -> repair.Agent:
        agent = repair.Agent(s, repair.Slurm(), w.now, asg=asg, state=repair.load_state(s))
        agent.tick()
        repair.save(agent)
        return agent

    agent = tick()  # within the grace: the job goes on
    assert agent.state["drains"][me]["class"] == "replace"
    assert "still running" in agent.state["said"][me], agent.lines
    assert c.run("squeue", "-h", "-j", job_id, "-o", "%T").stdout.strip() == "RUNNING"

    w.now += 60
    agent = tick()  # grace over: requeued through the real scontrol
    assert any(f"job(s) {job_id} sent back to the queue" in line for line in agent.lines), agent.lines
    wait_for(
        lambda: c.run("squeue", "-h", "-j", job_id, "-o", "%T").stdout.strip() in ("PENDING", "REQUEUED"),
        30,
        "the job to be queued again",
    )
    wait_for(lambda: repair.Slurm().jobs(me) == [], 60, "the node to have no job")

    w.now += 60
    agent = tick()  # empty: replaced through its group, the drain renamed
    assert [(r["instance_id"], r["group"]) for r in agent.state["replacements"]] == [(IID, "gpu-cluster-repair-a")]
    assert [t["instance_id"] for t in asg_standin.terminations(standin.state)] == [IID]
    assert standin.refused() == []
    got = _node(c)
    assert "DRAIN" in got["State"]
    assert got["Reason"] == f"gpu-cluster repair: replaced {IID}: gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)"

    # an operator's drain, seen by an agent with no memory of this node: never acted on
    (w.root / "repair" / "state.json").unlink()
    c.run("scontrol", "update", f"nodename={me}", "state=resume")
    c.run("scontrol", "update", f"nodename={me}", "state=drain", "reason=maintenance by alice")
    w.now += 60
    before = len(asg_standin.terminations(standin.state))
    tick()
    assert len(asg_standin.terminations(standin.state)) == before
    assert _node(c)["Reason"] == "maintenance by alice"
