"""The lanes' Auto Scaling stand-in (localcluster/asg_standin.py) under the repair agent's
real call: nodeside/repair.py with a boto3 client from nodeside/aws_client.py, over HTTP to
the model-checked AWS stand-in (localcluster/aws_standin.py)."""

from __future__ import annotations

import boto3
import pytest

from localcluster import asg_standin
from localcluster.aws_standin import AwsStandin
from nodeside import aws_client, repair
from tests.support.repair_world import FakeSlurm, World

IID = "i-01aaaaaaaaaaaaaaa"


@pytest.fixture
def standin(tmp_path):
    state = tmp_path / "aws"
    s = AwsStandin(asg_standin.handlers(state), state).start()
    asg_standin.add_instance(state, "gpu-cluster-local-a", IID)
    asg_standin.add_instance(state, "gpu-cluster-local-a", "i-02aaaaaaaaaaaaaaa")
    yield s
    s.stop()


@pytest.fixture
def asg(standin, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_AUTO_SCALING", standin.url)
    session = boto3.session.Session(aws_access_key_id="lane", aws_secret_access_key="lane")
    return aws_client.client("autoscaling", region="us-east-2", session=session)


def test_the_agent_replaces_through_the_stand_in_and_the_group_loses_only_that_instance(tmp_path, standin, asg):
    w = World(tmp_path / "fsx", FakeSlurm())
    w.slurm.add("ctl")
    w.slurm.add("n1")
    w.marker("n1", IID)
    w.health("n1", ("xid", "xid 79 (replace: GPU has fallen off the bus) on 0000:53:00 (/var/log/xid.log)", "replace"))
    w.slurm.drain("n1", "gpu-cluster health: xid 79 (replace: GPU has fallen off the bus) on 0000:53:00")
    s = w.settings(policy="auto")
    agent = repair.Agent(s, w.slurm, w.now, asg=asg, state=repair.load_state(s))
    agent.tick()
    assert [r["group"] for r in agent.state["replacements"]] == ["gpu-cluster-local-a"], agent.lines
    assert asg_standin.read_groups(standin.state) == {"gpu-cluster-local-a": ["i-02aaaaaaaaaaaaaaa"]}
    assert [t["instance_id"] for t in asg_standin.terminations(standin.state)] == [IID]
    assert standin.refused() == []
    [req] = standin.requests()
    assert req["params"] == {"InstanceId": IID, "ShouldDecrementDesiredCapacity": False}


def test_an_instance_of_no_group_and_a_decrementing_call_are_refused(standin, asg):
    with pytest.raises(aws_client.AwsCallError) as err:
        repair.terminate_instance(asg, "i-0ffffffffffffffff")
    assert err.value.code == "ValidationError" and "Instance Id not found" in str(err.value)
    with pytest.raises(aws_client.AwsCallError):
        aws_client.call(asg, "TerminateInstanceInAutoScalingGroup", InstanceId=IID, ShouldDecrementDesiredCapacity=True)
    assert asg_standin.terminations(standin.state) == []
