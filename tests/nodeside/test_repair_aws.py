"""The repair agent's one AWS call, against botocore's Stubber (AWS's own service model
checks the request and the answer): the terminate it sends, and what it does when AWS
refuses (access denied, throttling, an instance the group no longer has)."""

from __future__ import annotations

import datetime as dt
import json

import boto3
import pytest
from botocore.stub import Stubber

from nodeside import aws_client, repair
from tests.support.repair_world import FakeSlurm, World

TERMINATE = "terminate_instance_in_auto_scaling_group"
IID = "i-01aaaaaaaaaaaaaaa"
WANT = {"InstanceId": IID, "ShouldDecrementDesiredCapacity": False}
ANSWER = {
    "Activity": {
        "ActivityId": "5f1e2d3c-0000-4000-8000-000000000001",
        "AutoScalingGroupName": "gpu-cluster-dev-a",
        "Cause": "At 2027-01-15T08:00:00Z instance i-01aaaaaaaaaaaaaaa was taken out of service in response to a user request.",
        "StartTime": dt.datetime(2027, 1, 15, 8, 0, tzinfo=dt.UTC),
        "StatusCode": "InProgress",
    }
}


@pytest.fixture
def asg():
    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")
    client = aws_client.client("autoscaling", region="us-east-2", session=session)
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path / "fsx", FakeSlurm())
    w.slurm.add("ctl")
    w.slurm.add("n1")
    w.marker("n1", IID)
    w.health("n1", ("gpu-count", "gpu count 7 of 8 (nvidia-smi -L)", "replace"))
    w.slurm.drain("n1", "gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)")
    return w


def tick(w: World, client) -> repair.Agent:
    s = w.settings(policy="replace")
    agent = repair.Agent(s, w.slurm, w.now, asg=client, state=repair.load_state(s))
    agent.tick()
    repair.save(agent)
    return agent


def test_terminate_without_decrementing_and_the_group_from_the_answer(world, asg):
    client, stub = asg
    stub.add_response(TERMINATE, ANSWER, WANT)
    agent = tick(world, client)
    rep = agent.state["replacements"]
    assert [(r["node"], r["instance_id"], r["group"]) for r in rep] == [("n1", IID, "gpu-cluster-dev-a")]
    last = json.loads((world.root / "repair" / "history.jsonl").read_text().splitlines()[-1])
    assert (last["action"], last["instance_id"], last["group"]) == ("replaced", IID, "gpu-cluster-dev-a")


def test_access_denied_is_recorded_with_the_iam_action_and_retried_later(world, asg):
    client, stub = asg
    stub.add_client_error(
        TERMINATE,
        service_error_code="AccessDenied",
        service_message="User: arn:aws:sts::123456789012:assumed-role/dev-controller-role/i-0c is not authorized",
        http_status_code=403,
        expected_params=WANT,
    )
    agent = tick(world, client)
    assert agent.state["replacements"] == []
    line = agent.lines[-1]
    assert "autoscaling:TerminateInstanceInAutoScalingGroup: access denied (AccessDenied)" in line
    assert f"next try in {repair.DENIED_BACKOFF} s" in line
    history = [json.loads(x) for x in (world.root / "repair" / "history.jsonl").read_text().splitlines()]
    assert history[-1]["action"] == "error" and history[-1]["denied"] is True
    # not again at the next pass; once the back-off has passed, it tries again and succeeds
    world.now += 60
    agent = tick(world, client)
    assert "AWS refused the last attempt (access denied)" in agent.state["said"]["n1"]
    world.now += repair.DENIED_BACKOFF
    stub.add_response(TERMINATE, ANSWER, WANT)
    agent = tick(world, client)
    assert [r["instance_id"] for r in agent.state["replacements"]] == [IID]
    assert "n1" not in agent.state.get("backoff", {})


def test_throttling_is_retried_at_the_next_pass_and_not_counted(world, asg):
    client, stub = asg
    stub.add_client_error(
        TERMINATE, service_error_code="Throttling", service_message="Rate exceeded", expected_params=WANT
    )
    agent = tick(world, client)
    assert agent.state["replacements"] == [] and agent.lines[-1].startswith("repair: n1: throttled: ")
    assert "throttled (Throttling)" in agent.lines[-1] and "retried at the next pass" in agent.lines[-1]
    world.now += 60
    stub.add_response(TERMINATE, ANSWER, WANT)
    agent = tick(world, client)
    assert [r["instance_id"] for r in agent.state["replacements"]] == [IID]


def test_an_instance_the_group_does_not_have_is_an_error_not_a_replacement(world, asg):
    client, stub = asg
    stub.add_client_error(
        TERMINATE,
        service_error_code="ValidationError",
        service_message=f"Instance Id not found - No managed instance found for instance ID: {IID}",
        expected_params=WANT,
    )
    agent = tick(world, client)
    assert agent.state["replacements"] == []
    assert "ValidationError: Instance Id not found" in agent.lines[-1]
