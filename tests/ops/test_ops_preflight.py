"""`python3 -m ops preflight` against stubbed AWS: every request checked by botocore."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from ops.cli import main
from tests.support.ops_stubs import NOW, Aws, asg, context, reservation
from tests.support.preflight_account import (
    CR,
    END,
    STACK,
    SUBNET,
    VPC,
    P,
    block,
    stub_account,
    write_stack,
)

REPO = Path(__file__).resolve().parents[2]


def run(aws: Aws, root: Path, *extra: str) -> tuple[int, list[str], str]:
    ctx = context(aws)
    rc = main(["preflight", "--stack", "dev", "--stack-dir", str(root), *extra], ctx=ctx, session_for=aws.session)
    aws.done()
    return rc, ctx.out.getvalue().splitlines(), ctx.err.getvalue()


def test_clean_account_passes(tmp_path):
    aws = Aws()
    stub_account(aws)
    rc, lines, err = run(aws, write_stack(tmp_path))
    assert (rc, lines) == (0, ["preflight dev (us-east-2): OK, 0 warning(s)"])
    assert "checking dev in us-east-2" in err


def test_every_bad_block_fact_at_once(tmp_path):
    aws = Aws()
    stub_account(
        aws,
        blocks=[
            reservation(
                rid=CR,
                state="expired",
                instance_type="p4d.24xlarge",
                az="us-east-2a",
                count=4,
                start=NOW.replace(day=1, hour=0),
                end=NOW.replace(hour=11, minute=30),
            )
        ],
    )
    rc, lines, _ = run(aws, write_stack(tmp_path))
    assert rc == 1
    assert lines == [
        f"{P}.capacity.capacity_blocks[0].reservation_id: block {CR} is expired (ended 2026-12-01T11:30:00Z), not "
        "scheduled or active; no node can launch into it: run `python3 -m ops find-blocks` to find and buy one and "
        "replace this entry",
        f"{P}.capacity.capacity_blocks[0].reservation_id: block {CR} holds p4d.24xlarge but instance_type is "
        "p5.48xlarge; a block launches only its own type: use a p5.48xlarge block or change instance_type",
        f"{P}.capacity.capacity_blocks[0].availability_zone: block {CR} is in us-east-2a, not us-east-2b; set it to "
        "us-east-2a (and network.availability_zone with a subnet there)",
        f"{P}.capacity.capacity_blocks[0].instance_count: block {CR} holds 4 instances, not 2; set instance_count: 4",
        f"{P}.capacity.capacity_blocks[0].start: block {CR} starts at 2026-12-01T00:00:00Z, not 2026-11-30T11:30:00Z; "
        "the group would scale out at the wrong time: declare the block's start: pulumi config set --stack dev "
        f"--path '{P}.capacity.capacity_blocks[0].start' '2026-12-01T00:00:00Z' (or in the stack file: "
        "start: '2026-12-01T00:00:00Z')",
        f"{P}.capacity.capacity_blocks[0].end: block {CR} ends at 2026-12-01T11:30:00Z, earlier than the declared "
        "2026-12-07T11:30:00Z (an end never moves earlier: is this entry's reservation id another block?); EC2 "
        "terminates its instances 30 minutes before 2026-12-01T11:30:00Z, so declare that end: pulumi config set "
        f"--stack dev --path '{P}.capacity.capacity_blocks[0].end' '2026-12-01T11:30:00Z' (or in the stack file: "
        "end: '2026-12-01T11:30:00Z')",
        "preflight dev (us-east-2): 6 problem(s), 0 warning(s)",
    ]


def test_an_extended_block_is_named_an_extension_with_the_edit(tmp_path):
    """Same reservation id, a later EndDate (EC2 user guide, "Extend a Capacity Block")."""
    aws = Aws()
    stub_account(aws, blocks=[block(end=END + timedelta(days=7))])
    rc, lines, _ = run(aws, write_stack(tmp_path))
    assert rc == 1
    assert lines == [
        f"{P}.capacity.capacity_blocks[0].end: block {CR} was extended: EC2 says it ends at 2026-12-14T11:30:00Z, "
        "the stack file 2026-12-07T11:30:00Z; until the stack file says so the group scales in and Slurm drains the "
        "block at the old end. Declare the new end, then `pulumi up` (running nodes learn it without a restart): "
        f"pulumi config set --stack dev --path '{P}.capacity.capacity_blocks[0].end' '2026-12-14T11:30:00Z' "
        "(or in the stack file: end: '2026-12-14T11:30:00Z')",
        "preflight dev (us-east-2): 1 problem(s), 0 warning(s)",
    ]


def test_block_not_found(tmp_path):
    aws = Aws()
    stub_account(
        aws, block_error=("InvalidCapacityReservationId.NotFound", f"The capacity reservation '{CR}' does not exist")
    )
    rc, lines, _ = run(aws, write_stack(tmp_path))
    assert rc == 1
    assert lines[0] == (
        f"{P}.capacity.capacity_blocks[0].reservation_id: {CR} does not exist in this account in "
        "us-east-2; check the id and aws:region, or run `python3 -m ops find-blocks` to find and buy one"
    )


def test_access_denied_is_reported_per_lookup_and_quota_is_a_warning(tmp_path):
    aws = Aws()
    stub_account(
        aws,
        block_error=("UnauthorizedOperation", "You are not authorized to perform this operation."),
        quota_error="AccessDeniedException",
    )
    rc, lines, _ = run(aws, write_stack(tmp_path))
    assert rc == 1
    assert lines == [
        f"{P}.capacity.capacity_blocks[0].reservation_id: could not check: reading the Capacity Blocks: access denied "
        "to DescribeCapacityReservations; grant it to your AWS identity (You are not authorized to perform this operation.)",
        f"warning: {P}.capacity.nodes: could not read the Running On-Demand P instances quota (L-417A185B): access "
        "denied; check by hand that it allows 384 vCPUs (2 x 192)",
        "preflight dev (us-east-2): 1 problem(s), 1 warning(s)",
    ]


def test_public_subnet_in_other_az_without_dns(tmp_path):
    aws = Aws()
    stub_account(
        aws,
        subnet_az="us-east-2a",
        dns=False,
        main_table=True,
        routes=[{"DestinationCidrBlock": "0.0.0.0/0", "GatewayId": "igw-0123456789abcdef0", "State": "active"}],
    )
    rc, lines, _ = run(aws, write_stack(tmp_path))
    sp = f"{P}.network.subnet_id"
    assert rc == 1
    assert lines == [
        f"{sp}: {SUBNET} is in us-east-2a but network.availability_zone is us-east-2b; use a private subnet in us-east-2b",
        f"{sp}: {SUBNET} is public (0.0.0.0/0 goes to igw-0123456789abcdef0); nodes have no public IP and must not be "
        "reachable: use a private subnet whose 0.0.0.0/0 goes to a NAT gateway",
        f"{sp}: VPC {VPC} has DNS support off; the FSx and SSM endpoint names do not resolve: aws ec2 "
        f"modify-vpc-attribute --vpc-id {VPC} --enable-dns-support",
        "preflight dev (us-east-2): 3 problem(s), 0 warning(s)",
    ]


def test_subnet_without_egress_missing_subnet_and_foreign_az(tmp_path):
    aws = Aws()
    stub_account(
        aws,
        routes=[{"DestinationCidrBlock": "10.0.0.0/16", "GatewayId": "local", "State": "active"}],
        zones=("us-east-2a",),
    )
    rc, lines, _ = run(aws, write_stack(tmp_path))
    assert rc == 1
    assert lines[:2] == [
        f"{P}.network.availability_zone: us-east-2b is not an available zone of us-east-2 (us-east-2a); use one of "
        "them or fix aws:region",
        f"{P}.network.subnet_id: {SUBNET} has no 0.0.0.0/0 route; nodes need egress for SSM, S3 and image pulls: "
        "add a route to a NAT gateway",
    ]
    aws = Aws()
    stub_account(aws, subnet_missing=True)
    rc, lines, _ = run(aws, write_stack(tmp_path))
    assert lines[0] == (
        f"{P}.network.subnet_id: {SUBNET} does not exist in this account in us-east-2; check the id, "
        "or omit subnet_id to create a VPC"
    )


def test_name_collisions_unless_tagged_for_this_cluster(tmp_path):
    aws = Aws()
    lt = {
        "LaunchTemplateId": "lt-0123456789abcdef0",
        "LaunchTemplateName": "gpu-cluster-dev",
        "Tags": [{"Key": "GpuClusterName", "Value": "dev"}],
    }  # ours: an earlier `pulumi up`
    group = {
        "AutoScalingGroupName": "gpu-cluster-dev-block-a",
        "MinSize": 0,
        "MaxSize": 1,
        "DesiredCapacity": 0,
        "DefaultCooldown": 300,
        "AvailabilityZones": ["us-east-2b"],
        "HealthCheckType": "EC2",
        "CreatedTime": NOW,
        "Tags": [
            {
                "Key": "team",
                "Value": "other",
                "ResourceId": "gpu-cluster-dev-block-a",
                "ResourceType": "auto-scaling-group",
                "PropagateAtLaunch": True,
            }
        ],
    }
    stub_account(aws, lt=lt, asgs={"gpu-cluster-dev-block-a": group})
    rc, lines, _ = run(aws, write_stack(tmp_path))
    assert (rc, lines) == (
        1,
        [
            f"{P}.name: Auto Scaling group gpu-cluster-dev-block-a already exists in us-east-2 (without a GpuClusterName "
            "tag); choose another cluster name, or delete it if nothing uses it",
            "preflight dev (us-east-2): 1 problem(s), 0 warning(s)",
        ],
    )


def test_quota_too_low_warns_for_blocks(tmp_path):
    aws = Aws()
    stub_account(aws, quota=192.0)
    rc, lines, _ = run(aws, write_stack(tmp_path))
    assert (rc, lines) == (
        0,
        [
            f"warning: {P}.capacity.nodes: 2 x p5.48xlarge need 384 vCPUs but the Running On-Demand P instances quota "
            "(L-417A185B) in us-east-2 is 192; request an increase in Service Quotas",
            "preflight dev (us-east-2): OK, 1 warning(s)",
        ],
    )


def test_json_output(tmp_path):
    aws = Aws()
    stub_account(aws, blocks=[block(state="cancelled")])
    rc, lines, _ = run(aws, write_stack(tmp_path), "--json")
    doc = json.loads("\n".join(lines))
    assert rc == 1 and doc["ok"] is False and doc["region"] == "us-east-2"
    assert [(p["path"], p["severity"]) for p in doc["problems"]] == [
        (f"{P}.capacity.capacity_blocks[0].reservation_id", "error")
    ]
    assert doc["problems"][0]["message"].startswith(f"block {CR} is cancelled, not scheduled or active")


def test_bad_config_stops_before_any_aws_call(tmp_path):
    aws = Aws()  # no stubbed answer: any AWS call would fail the test
    bad = {**STACK, "capacity": {**STACK["capacity"], "nodes": 3}}
    rc, lines, _ = run(aws, write_stack(tmp_path, bad))
    assert rc == 2
    assert lines == [
        f"{P}.capacity.nodes: 3 nodes requested but the capacity blocks hold 2; lower capacity.nodes or add a block",
        "preflight dev: 1 config problem(s); fix the stack file first",
    ]


def test_region_override_reaches_the_clients(tmp_path):
    aws = Aws(region="us-west-2")
    stub_account(aws, zones=("us-west-2a",))
    cluster = {
        **STACK,
        "network": {"availability_zone": "us-west-2a", "subnet_id": SUBNET},
        "capacity": {
            "nodes": 2,
            "capacity_blocks": [{**STACK["capacity"]["capacity_blocks"][0], "availability_zone": "us-west-2a"}],
        },
    }
    # The stubbed block and subnet say us-east-2b: the mismatch lines prove the facts were compared.
    rc, lines, _ = run(aws, write_stack(tmp_path, cluster), "--region", "us-west-2")
    assert rc == 1
    assert lines[-1] == "preflight dev (us-west-2): 2 problem(s), 0 warning(s)"


def test_subprocess_without_credentials_fails_with_one_clear_line(tmp_path):
    """The real entry point, no stub: no credentials means exit 3 after the offline checks, one line saying
    why the AWS checks did not run, no traceback, no network."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYTHONPATH": str(REPO),
    }
    r = subprocess.run(
        [sys.executable, "-m", "ops", "preflight", "--stack", "dev", "--stack-dir", str(write_stack(tmp_path))],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
    )
    assert r.returncode == 3
    assert r.stdout.splitlines() == [
        "AWS checks not run: reading AWS: no AWS credentials; configure a profile or environment credentials",
        "preflight dev (us-east-2): OK, 0 warning(s) (offline checks only)",
    ]
    assert "Traceback" not in r.stderr


def test_one_unknown_block_among_several_is_found_id_by_id():
    from ops.facts import describe_blocks

    aws = Aws()
    ec2 = aws.stub("ec2")
    other = "cr-0fedcba9876543210"
    ec2.add_client_error(
        "describe_capacity_reservations",
        "InvalidCapacityReservationId.NotFound",
        "nope",
        expected_params={"CapacityReservationIds": [CR, other]},
    )
    ec2.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [reservation(rid=CR)]},
        {"CapacityReservationIds": [CR]},
    )
    ec2.add_client_error(
        "describe_capacity_reservations",
        "InvalidCapacityReservationId.NotFound",
        "nope",
        expected_params={"CapacityReservationIds": [other]},
    )
    found = describe_blocks(aws.factory("ec2", "us-east-2"), [CR, other])
    aws.done()
    assert (found[CR].found, found[CR].state, found[other].found) == (True, "active", False)


# --- the pinned image's manifest (its tags, through DescribeImages) against the pins -------


def test_a_plain_image_is_a_warning_naming_the_bake(tmp_path):
    from tests.support.preflight_account import AMI, IMAGE

    aws = Aws()
    stub_account(aws, image={k: v for k, v in IMAGE.items() if k != "Tags"})
    rc, lines, _ = run(aws, write_stack(tmp_path))
    assert (rc, lines) == (
        0,
        [
            f"warning: {P}.image.ami_id: {AMI} is not a baked image (no GpuClusterImageManifest tag): every node "
            "installs Slurm, munge, Enroot, Pyxis and the Lustre client at boot, minutes each through the NAT; bake "
            "one with `python3 -m ops bake --stack <stack> --bucket <bucket>`",
            "preflight dev (us-east-2): OK, 1 warning(s)",
        ],
    )


def test_an_image_baked_for_other_pins_is_refused_with_each_difference(tmp_path):
    from model.pins import PRODUCT
    from tests.support import baked_image
    from tests.support.preflight_account import AMI, IMAGE

    m = baked_image.manifest(enroot="4.1.2", slurm="24.11.1-1")
    deb = PRODUCT.downloads[0].file
    m["downloads"].pop(deb)
    aws = Aws()
    stub_account(aws, image={**IMAGE, "Tags": baked_image.tags(m)})
    rc, lines, _ = run(aws, write_stack(tmp_path))
    assert rc == 1
    assert lines == [
        f"{P}.image.ami_id: {AMI} was baked for other pins (Slurm 24.11.1-1 is not of the pinned series 23.11; "
        f"Enroot 4.1.2 is not the pinned {PRODUCT.enroot_version}; {deb} was not downloaded by the bake (pinned "
        "record)): step 20 on its nodes refuses it; bake a new image (`python3 -m ops bake`) and pin it",
        "preflight dev (us-east-2): 1 problem(s), 0 warning(s)",
    ]


def _live(block: str, desired: int, group: str) -> dict:
    """A live group, tagged as the program tags it (GpuClusterBlock: the block it follows)."""
    return asg(group, [], desired=desired, block=None, tags={"GpuClusterBlock": block})


def _move_run(tmp_path, live: dict | None = None, live_error=None):
    aws = Aws()
    # name_facts sees the same groups (ours: tagged GpuClusterName=dev, so no collision)
    stub_account(aws, asgs=live, live=live, live_error=live_error)
    return run(aws, write_stack(tmp_path))


def test_a_move_of_the_controller_into_a_running_block_is_refused_as_pulumi_up_refuses_it(tmp_path):
    """Block 'z' hosted the controller and was dropped from the list: 'a' becomes the
    host without any key naming it, and its running group would shrink by one. The same
    rule and words as the program's check (tests/infra/test_controller_move.py)."""
    live = {
        "gpu-cluster-dev-controller": _live("z", 1, "controller"),
        "gpu-cluster-dev-block-a": _live("a", 2, "block-a"),
    }
    rc, lines, _ = _move_run(tmp_path, live)
    assert (rc, lines) == (
        1,
        [
            f"{P}.controller.block: the controller would move from block 'z' (where the live controller group "
            "runs) into block 'a' (it is the only block left), whose group runs 2 nodes: giving one of them to "
            "the controller shrinks it to 1, and Auto Scaling terminates a running worker of block 'a' chosen by "
            "its termination policy, not by Slurm. Nothing was changed; choose one: list block 'z' again with "
            "controller.block: z if it has not ended, set controller.block to a block that has not started, or "
            "set controller.placement: dedicated (recommended: a small instance that outlives blocks and takes "
            "no block slot)",
            "preflight dev (us-east-2): 1 problem(s), 0 warning(s)",
        ],
    )


def test_the_controller_staying_in_its_block_or_a_group_that_keeps_its_size_passes(tmp_path):
    stays = {
        "gpu-cluster-dev-controller": _live("a", 1, "controller"),
        "gpu-cluster-dev-block-a": _live("a", 1, "block-a"),
    }
    assert _move_run(tmp_path, stays)[:2] == (0, ["preflight dev (us-east-2): OK, 0 warning(s)"])
    # moving from 'z' into a host whose group runs no more nodes than declared (a free slot)
    keeps = {**stays, "gpu-cluster-dev-controller": _live("z", 1, "controller")}
    assert _move_run(tmp_path, keeps)[:2] == (0, ["preflight dev (us-east-2): OK, 0 warning(s)"])


def test_the_controller_move_check_denied_is_a_problem_naming_the_call(tmp_path):
    denied = (
        "AccessDenied",
        "User: arn:aws:iam::123456789012:user/ci is not authorized to perform: autoscaling:DescribeAutoScalingGroups",
    )
    rc, lines, _ = _move_run(tmp_path, live_error=denied)
    assert (rc, lines) == (
        1,
        [
            f"{P}.controller.block: could not check: reading where the live controller runs: access denied to "
            "DescribeAutoScalingGroups; grant it to your AWS identity (User: arn:aws:iam::123456789012:user/ci is "
            "not authorized to perform: autoscaling:DescribeAutoScalingGroups)",
            "preflight dev (us-east-2): 1 problem(s), 0 warning(s)",
        ],
    )


def test_a_dedicated_controller_reads_no_group_for_the_move(tmp_path):
    aws = Aws()
    stub_account(aws, move_check=False)  # any DescribeAutoScalingGroups beyond name_facts' fails the test
    cluster = {**STACK, "controller": {"placement": "dedicated"}}
    rc, lines, _ = run(aws, write_stack(tmp_path, cluster))
    assert (rc, lines[-1]) == (0, "preflight dev (us-east-2): OK, 0 warning(s)")
