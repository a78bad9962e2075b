"""`python3 -m ops replace`: the stage sequence against stubbed Auto Scaling, EC2 and SSM.

A careful operator's replace: it shows the node's jobs, asks (or takes --yes; no terminal
and no --yes is a refusal), needs --wait or --force when jobs run, drains, waits for the
jobs within the bound (a fake clock: no real sleep), then terminates without decrementing
and reports each stage once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ops.cli import main
from ops.remote import drain_script, force_script, jobs_script, node_state_script
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


JOB = "101|alice|train|RUNNING|1:02:03"


def stub_jobs(aws: Aws, stdout: str = "", cid: str = "00") -> None:
    stub_ssm(
        aws,
        CTRL,
        jobs_script("ip-10-0-1-6"),
        "squeue ip-10-0-1-6",
        60,
        stdout,
        command_id=f"11111111-2222-3333-4444-5555555555{cid}",
    )


def stub_drain(aws: Aws, status: str = "Success", jobs: str = "") -> None:
    stub_controller(aws, CTRL)
    stub_jobs(aws, jobs)
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


def run(aws: Aws, tmp_path: Path, *extra: str, answers: list[str] | None = None, interactive: bool = False):
    clock = FakeClock()
    ctx = context(aws, clock=clock, answers=answers, interactive=interactive)
    rc = main(
        ["replace", "ip-10-0-1-6", "--stack", "dev", "--stack-dir", str(stack_dir(tmp_path)), *extra],
        ctx=ctx,
        session_for=aws.session,
    )
    aws.done()
    return rc, ctx.out.getvalue(), ctx.err.getvalue(), clock


def stub_replacement(aws: Aws) -> None:
    """Terminate, a new instance after two polls, Slurm idle after one."""
    a = aws.stub("autoscaling")
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


def test_replace_stage_sequence(tmp_path):
    aws = Aws()
    stub_resolve(aws)
    stub_drain(aws)
    stub_replacement(aws)
    rc, out, err, clock = run(aws, tmp_path, "--poll", "20", "--yes")
    assert rc == 0
    assert out.splitlines() == [
        f"resolve: ok: ip-10-0-1-6 is {W1} (ip-10-0-1-6) in gpu-cluster-dev-block-a",
        "jobs: ok: ip-10-0-1-6: no jobs",
        "confirm: ok: --yes",
        f'drain: ok: ip-10-0-1-6 drained (reason "gpu-cluster replace") via {CTRL}',
        "wait: skipped: no jobs on the node",
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
    rc, out, _, _ = run(aws, tmp_path, "--json", "--yes")  # no terminate stubbed: calling it would fail the test
    doc = json.loads(out)
    assert rc == 1 and doc["ok"] is False
    assert [(s["stage"], s["status"]) for s in doc["stages"]] == [
        ("resolve", "ok"),
        ("jobs", "ok"),
        ("confirm", "ok"),
        ("drain", "failed"),
    ]
    assert doc["stages"][3]["detail"] == (
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
    rc, out, _, clock = run(aws, tmp_path, "--no-drain", "--instance-timeout", "1", "--yes")
    assert rc == 1
    assert out.splitlines()[1:] == [
        "jobs: skipped: --no-drain: the controller is not asked",
        "confirm: ok: --yes",
        "drain: skipped: --no-drain",
        "wait: skipped: --no-drain: jobs on the node are not waited for",
        f"terminate: ok: {W1} terminating",
        "new-instance: failed: no new InService instance in gpu-cluster-dev-block-a after 1 min; check the group's "
        "activities (aws autoscaling describe-scaling-activities --auto-scaling-group-name gpu-cluster-dev-block-a)",
    ]
    assert clock.sleeps == [30, 30]


def test_unknown_node_and_bad_name(tmp_path, capsys):
    aws = Aws()
    aws.stub("ec2").add_response("describe_instances", {"Reservations": []}, BY_NAME)
    rc, out, _, _ = run(aws, tmp_path)
    assert rc == 1
    assert out.strip() == "resolve: failed: no running instance of cluster dev is ip-10-0-1-6"
    aws = Aws()  # no stubbed answer: the name is refused before any AWS call
    with pytest.raises(SystemExit) as exit_:
        main(["replace", "node7", "--stack", "dev", "--stack-dir", str(stack_dir(tmp_path))], session_for=aws.session)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "gpu-cluster-ops replace: error: argument node: 'node7' is neither a Slurm node name (ip-10-0-1-5) nor an "
        "instance id (i-0123456789abcdef0)"
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


def _stages(out: str) -> list[str]:
    return [line.split(":", 1)[0] for line in out.splitlines()]


def test_without_a_terminal_and_without_yes_nothing_changes(tmp_path):
    aws = Aws()
    stub_resolve(aws)
    stub_controller(aws, CTRL)
    stub_jobs(aws)
    rc, out, _, _ = run(aws, tmp_path)  # no drain or terminate stubbed: either call would fail
    assert rc == 1
    assert (
        out.splitlines()[-1] == "confirm: failed: no terminal to confirm on; pass --yes to replace without the question"
    )


def test_the_question_and_a_refusal(tmp_path):
    aws = Aws()
    stub_resolve(aws)
    stub_controller(aws, CTRL)
    stub_jobs(aws)
    clock = FakeClock()
    ctx = context(aws, clock=clock, answers=["n"], interactive=True)
    rc = main(
        ["replace", "ip-10-0-1-6", "--stack", "dev", "--stack-dir", str(stack_dir(tmp_path))],
        ctx=ctx,
        session_for=aws.session,
    )
    aws.done()
    assert rc == 1
    assert ctx.prompts == [f"Drain ip-10-0-1-6, terminate {W1} and launch a replacement? [y/N] "]  # type: ignore[attr-defined]
    assert ctx.out.getvalue().splitlines()[-1] == "confirm: failed: not confirmed (answer 'n'); nothing changed"


def test_running_jobs_need_wait_or_force(tmp_path):
    aws = Aws()
    stub_resolve(aws)
    stub_controller(aws, CTRL)
    stub_jobs(aws, JOB + "\n")
    rc, out, _, _ = run(aws, tmp_path, "--yes")
    assert rc == 1
    assert out.splitlines()[1] == "jobs: ok: ip-10-0-1-6: 1 job(s): 101 alice train RUNNING 1:02:03"
    assert out.splitlines()[2] == (
        "confirm: failed: 1 job(s) run on ip-10-0-1-6; pass --wait MINUTES to drain and let them end or be "
        "requeued first, or --force to requeue (or cancel) them now"
    )


def test_wait_bound_leaves_the_node_drained(tmp_path):
    aws = Aws()
    stub_resolve(aws)
    stub_drain(aws, jobs=JOB + "\n")
    for n in range(3):  # t = 0, 60, 120 s: the bound is 2 minutes
        stub_jobs(aws, JOB + "\n", cid=f"1{n}")
    rc, out, err, clock = run(aws, tmp_path, "--yes", "--wait", "2", "--poll", "60", answers=[])
    assert rc == 1
    assert _stages(out) == ["resolve", "jobs", "confirm", "drain", "wait"]
    assert out.splitlines()[-1] == (
        "wait: failed: 1 job(s): 101 alice train RUNNING 1:02:03 still on ip-10-0-1-6; it stays drained "
        "(scontrol update nodename=ip-10-0-1-6 state=resume to take it back); run again with a longer --wait or with --force"
    )
    assert clock.sleeps == [60, 60]
    assert "  ... waiting for 1 job(s) on ip-10-0-1-6 to end (1.0 min)" in err


def test_wait_then_replace_when_the_jobs_end(tmp_path):
    aws = Aws()
    stub_resolve(aws)
    stub_drain(aws, jobs=JOB + "\n")
    stub_jobs(aws, JOB + "\n", cid="10")
    stub_jobs(aws, "", cid="11")
    stub_replacement(aws)
    rc, out, _, _ = run(aws, tmp_path, "--yes", "--wait", "30", "--poll", "20")
    assert rc == 0, out
    assert _stages(out) == ["resolve", "jobs", "confirm", "drain", "wait", "terminate", "new-instance", "slurm-idle"]
    assert "wait: ok: 1 job(s) off ip-10-0-1-6: ended" in out.splitlines()


def test_force_requeues_at_once_then_replaces(tmp_path):
    aws = Aws()
    stub_resolve(aws)
    stub_drain(aws, jobs=JOB + "\n")
    stub_ssm(
        aws,
        CTRL,
        force_script("ip-10-0-1-6"),
        "requeue jobs on ip-10-0-1-6",
        120,
        "requeued 101\n",
        command_id="11111111-2222-3333-4444-555555555520",
    )
    stub_jobs(aws, "", cid="21")
    stub_replacement(aws)
    rc, out, _, _ = run(aws, tmp_path, "--force", "--poll", "20", answers=["yes"], interactive=True)
    assert rc == 0, out
    assert out.splitlines()[2] == "confirm: ok: confirmed"
    assert "wait: ok: 1 job(s) off ip-10-0-1-6: requeued 101" in out.splitlines()
    assert len(set(_stages(out))) == len(_stages(out)) == 8  # each stage reported once
