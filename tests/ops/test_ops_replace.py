"""`python3 -m ops replace`: the stage sequence against stubbed Auto Scaling, EC2 and SSM."""

from __future__ import annotations

import json
from pathlib import Path

from ops.cli import main
from ops.remote import drain_script, node_state_script
from tests.support.ops_stubs import (
    NOW,
    Aws,
    FakeClock,
    asg,
    asg_instance,
    context,
    ec2_instance,
    stub_controller,
    stub_ssm,
)
from tests.support.status_stack import CTRL, W1, stack_dir

NEW = "i-0d000000000000003"
GROUP = {"AutoScalingGroupNames": ["gpu-cluster-dev-block-a"]}
BY_NAME = {
    "Filters": [
        {"Name": "tag:GpuClusterName", "Values": ["dev"]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
        {"Name": "private-ip-address", "Values": ["10.0.1.6"]},
    ]
}


def stub_resolve(aws: Aws) -> None:
    aws.stub("ec2").add_response(
        "describe_instances", {"Reservations": [{"Instances": [ec2_instance(W1, "10.0.1.6", "block-a")]}]}, BY_NAME
    )


def stub_drain(aws: Aws, status: str = "Success") -> None:
    stub_controller(aws, CTRL)
    stub_ssm(
        aws,
        CTRL,
        drain_script("ip-10-0-1-6", "gpu-cluster replace"),
        "drain ip-10-0-1-6",
        120,
        "",
        status=status,
        code=0 if status == "Success" else 1,
    )


def group(*instances) -> dict:
    return {"AutoScalingGroups": [asg("block-a", list(instances))]}


def run(aws: Aws, tmp_path: Path, *extra: str):
    clock = FakeClock()
    ctx = context(aws, clock=clock)
    rc = main(
        ["replace", "ip-10-0-1-6", "--stack", "dev", "--stack-dir", str(stack_dir(tmp_path)), *extra],
        ctx=ctx,
        session_for=aws.session,
    )
    aws.done()
    return rc, ctx.out.getvalue(), ctx.err.getvalue(), clock


def test_replace_stage_sequence(tmp_path):
    aws = Aws()
    a = aws.stub("autoscaling")
    stub_resolve(aws)
    stub_drain(aws)
    a.add_response("describe_auto_scaling_groups", group(asg_instance(W1)), GROUP)
    a.add_response(
        "terminate_instance_in_auto_scaling_group",
        {
            "Activity": {
                "ActivityId": "a1",
                "AutoScalingGroupName": "gpu-cluster-dev-block-a",
                "Cause": "user request",
                "StartTime": clock_start(),
                "StatusCode": "InProgress",
                "Description": f"Terminating EC2 instance: {W1}",
            }
        },
        {"InstanceId": W1, "ShouldDecrementDesiredCapacity": False},
    )
    a.add_response("describe_auto_scaling_groups", group(asg_instance(W1, state="Terminating")), GROUP)
    a.add_response("describe_auto_scaling_groups", group(asg_instance(NEW, state="Pending")), GROUP)
    a.add_response("describe_auto_scaling_groups", group(asg_instance(NEW)), GROUP)
    aws.stub("ec2").add_response(
        "describe_instances",
        {"Reservations": [{"Instances": [ec2_instance(NEW, "10.0.1.7", "block-a")]}]},
        {"InstanceIds": [NEW]},
    )
    for answer, cid in (("", "01"), ("idle\n", "02")):  # not registered yet, then idle
        stub_controller(aws, CTRL)
        stub_ssm(
            aws,
            CTRL,
            node_state_script("ip-10-0-1-7"),
            "sinfo ip-10-0-1-7",
            60,
            answer,
            command_id=f"11111111-2222-3333-4444-5555555555{cid}",
        )
    rc, out, err, clock = run(aws, tmp_path, "--poll", "20")
    assert rc == 0
    assert out.splitlines() == [
        f"resolve: ok: ip-10-0-1-6 is {W1} (ip-10-0-1-6) in gpu-cluster-dev-block-a",
        f'drain: ok: ip-10-0-1-6 drained (reason "gpu-cluster replace") via {CTRL}',
        f"terminate: ok: {W1} terminating; Terminating EC2 instance: {W1}",
        f"new-instance: ok: {NEW} (ip-10-0-1-7) InService in gpu-cluster-dev-block-a",
        "slurm-idle: ok: ip-10-0-1-7 is idle in Slurm",
    ]
    assert clock.sleeps == [20, 20, 20]  # two polls for the instance, one for Slurm
    assert "  ... waiting for a new instance in gpu-cluster-dev-block-a: 0/1 InService (0.3 min)" in err
    assert "  ... waiting for ip-10-0-1-7 to be idle in Slurm: not registered yet (0.0 min)" in err


def clock_start():
    return NOW


def test_failed_drain_stops_before_terminating(tmp_path):
    aws = Aws()
    stub_resolve(aws)
    stub_drain(aws, status="Failed")
    rc, out, _, _ = run(aws, tmp_path, "--json")  # no terminate stubbed: calling it would fail the test
    doc = json.loads(out)
    assert rc == 1 and doc["ok"] is False
    assert [(s["stage"], s["status"]) for s in doc["stages"]] == [("resolve", "ok"), ("drain", "failed")]
    assert doc["stages"][1]["detail"] == (
        f"draining ip-10-0-1-6 on {CTRL}: Failed (exit 1): ; pass --no-drain to replace it anyway"
    )


def test_no_new_instance_within_the_bound(tmp_path):
    aws = Aws()
    a = aws.stub("autoscaling")
    stub_resolve(aws)
    a.add_response("describe_auto_scaling_groups", group(asg_instance(W1)), GROUP)
    a.add_response(
        "terminate_instance_in_auto_scaling_group",
        {
            "Activity": {
                "ActivityId": "a1",
                "AutoScalingGroupName": "gpu-cluster-dev-block-a",
                "Cause": "c",
                "StartTime": clock_start(),
                "StatusCode": "InProgress",
            }
        },
        {"InstanceId": W1, "ShouldDecrementDesiredCapacity": False},
    )
    for _ in range(3):  # t = 0, 30, 60 s; the bound is 1 minute
        a.add_response("describe_auto_scaling_groups", group(), GROUP)
    rc, out, _, clock = run(aws, tmp_path, "--no-drain", "--instance-timeout", "1")
    assert rc == 1
    assert out.splitlines()[1:] == [
        "drain: skipped: --no-drain",
        f"terminate: ok: {W1} terminating",
        "new-instance: failed: no new InService instance in gpu-cluster-dev-block-a after 1 min; check the group's "
        "activities (aws autoscaling describe-scaling-activities --auto-scaling-group-name gpu-cluster-dev-block-a)",
    ]
    assert clock.sleeps == [30, 30]


def test_unknown_node_and_bad_name(tmp_path):
    aws = Aws()
    aws.stub("ec2").add_response("describe_instances", {"Reservations": []}, BY_NAME)
    rc, out, _, _ = run(aws, tmp_path)
    assert rc == 1
    assert out.strip() == "resolve: failed: no running instance of cluster dev is ip-10-0-1-6"
    aws = Aws()
    ctx = context(aws)
    rc = main(
        ["replace", "node7", "--stack", "dev", "--stack-dir", str(stack_dir(tmp_path))],
        ctx=ctx,
        session_for=aws.session,
    )
    assert rc == 1
    assert ctx.out.getvalue().strip() == (
        "resolve: failed: 'node7' is neither a Slurm node name (ip-10-0-1-5) nor an instance id (i-...)"
    )


def test_instance_id_of_another_cluster_is_refused(tmp_path):
    aws = Aws()
    other = ec2_instance(W1, "10.0.1.6", "block-a")
    other["Tags"] = [{"Key": "GpuClusterName", "Value": "prod"}]
    aws.stub("ec2").add_response(
        "describe_instances", {"Reservations": [{"Instances": [other]}]}, {"InstanceIds": [W1]}
    )
    ctx = context(aws)
    rc = main(
        ["replace", W1, "--stack", "dev", "--stack-dir", str(stack_dir(tmp_path))], ctx=ctx, session_for=aws.session
    )
    aws.done()
    assert rc == 1
    assert ctx.out.getvalue().strip() == f"resolve: failed: {W1} is not a node of cluster dev (tag GpuClusterName=prod)"
