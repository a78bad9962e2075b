"""Capacity Block lifecycle and data safety, under the plan's mocks: moving to the next
block, the FSx replacement guard, the pinned image and the in-program preflight."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime

import pulumi
import pytest

from model.config import parse_config
from model.deploy import deploy_problems
from model.fsx_identity import fsx_identity
from offline.mocks import PLAN_NOW, PlanMocks, declared_blocks
from tests.support.mocks import REGION, run_program, valid_raw

R = "gpu-cluster:cluster"
ASG = "aws:autoscaling/group:Group"
SCHED = "aws:autoscaling/schedule:Schedule"
FS = "aws:fsx/lustreFileSystem:LustreFileSystem"
CR_A, CR_B = "cr-0123456789abcdef0", "cr-0fedcba9876543210"


def pinned_raw() -> dict:
    """valid_raw() with fsx.pinned equal to what it creates (as after the first up)."""
    raw = valid_raw()
    raw["fsx"] = {"pinned": fsx_identity(parse_config(raw)).model_dump()}
    return raw


def refusal(raw: dict, mocks: PlanMocks | None = None) -> list[str]:
    with pytest.raises(pulumi.RunError) as exc:
        run_program(raw, mocks=mocks)
    return str(exc.value).splitlines()


# --- moving to the next block -------------------------------------------------------


def _by_key(run):
    return {(r["type"], r["name"]): r["inputs"] for r in run.resources if r["custom"]}


def test_moving_to_the_next_block_changes_only_groups_and_their_actions():
    old = pinned_raw()
    new = copy.deepcopy(old)
    new["capacity"]["capacity_blocks"] = [
        {
            "name": "b",
            "reservation_id": CR_B,
            "instance_count": 2,
            "availability_zone": "us-east-2b",
            "start": "2026-12-08T11:30:00Z",
            "end": "2026-12-15T11:30:00Z",
        }
    ]
    # The edit happens after block a's nodes stopped (10:50), before block b starts.
    now = datetime(2026, 12, 8, 11, 0, tzinfo=UTC)
    old_now = datetime(2026, 12, 2, tzinfo=UTC)
    before, after = _by_key(run_program(old, now=old_now)), _by_key(run_program(new, now=now))

    kept = {k for k in before if k[0] not in (ASG, SCHED)}
    assert kept == {k for k in after if k[0] not in (ASG, SCHED)}
    # The published block ends change in place (same key): the controller learns block b.
    ends = ("aws:s3/bucketObjectv2:BucketObjectv2", "t1-block-ends")
    assert json.loads(after[ends]["content"])["blocks"] == {
        "b": {"end": "2026-12-15T11:30:00Z", "reservation_id": CR_B}
    }
    assert {k: v for k, v in before[ends].items() if k != "content"} == {
        k: v for k, v in after[ends].items() if k != "content"
    }
    for key in sorted(kept - {ends}):
        assert before[key] == after[key], f"{key} changed"
    # FSx, security group, template and bucket are among them, by the same logical names.
    for key in (
        (FS, "t1-lustre"),
        ("aws:ec2/securityGroup:SecurityGroup", "t1-sg"),
        ("aws:ec2/launchTemplate:LaunchTemplate", "t1-lt"),
        ("aws:s3/bucket:Bucket", "t1-payload"),
    ):
        assert key in kept

    groups_before = {n for t, n in before if t in (ASG, SCHED)}
    groups_after = {n for t, n in after if t in (ASG, SCHED)}
    # block-a's group and actions go; block-b's come; the controller group stays (same
    # name, now targeting b) with new actions.
    assert groups_before - groups_after == {"t1-block-a", "t1-block-a-scale-in"}
    # Block b starts 30 minutes after the edit, within model.schedule.CREATION_LEAD: its
    # groups are declared at full size now (launches are refused and retried until the
    # start) and get no scale-out action that could reach Auto Scaling after its time.
    assert groups_after - groups_before == {"t1-block-b", "t1-block-b-scale-in"}
    controller = after[(ASG, "t1-controller")]
    assert controller["name"] == "gpu-cluster-dev-controller"  # AWS names follow the stack (dev)
    assert controller["capacityReservationSpecification"]["capacityReservationTarget"] == {
        "capacityReservationIds": [CR_B]
    }
    assert controller["desiredCapacity"] == 1
    assert after[(SCHED, "t1-controller-scale-in")]["startTime"] == "2026-12-15T10:50:00Z"


def test_group_names_follow_block_names_not_positions():
    raw = valid_raw()
    raw["capacity"] = {
        "nodes": 4,
        "capacity_blocks": [
            {
                "name": "x",
                "reservation_id": CR_A,
                "instance_count": 2,
                "availability_zone": "us-east-2b",
                "start": "2026-12-01T11:30:00Z",
                "end": "2026-12-08T11:30:00Z",
            },
            {
                "name": "y",
                "reservation_id": CR_B,
                "instance_count": 2,
                "availability_zone": "us-east-2b",
                "start": "2026-12-01T11:30:00Z",
                "end": "2026-12-08T11:30:00Z",
            },
        ],
    }
    raw["controller"] = {"block": "x"}
    names = {r["name"]: r["inputs"]["name"] for r in run_program(raw).of_type(ASG)}
    assert names == {
        # AWS names follow the stack (run_program runs stack dev), logical names the cluster.
        "t1-controller": "gpu-cluster-dev-controller",
        "t1-block-x": "gpu-cluster-dev-block-x",
        "t1-block-y": "gpu-cluster-dev-block-y",
    }


# --- FSx replacement guard ----------------------------------------------------------

# Every config edit that replaces the file system ([TF-FSX] ForceNew, storage decrease;
# a rename moves every logical name; a new subnet). (id, mutate, path of the refusal)
FORCE_NEW = [
    (
        "deployment-type",
        lambda r: r["fsx"].update(deployment_type="PERSISTENT_1", per_unit_storage_throughput=200),
        f"{R}.fsx.deployment_type",
    ),
    (
        "storage-decrease",
        lambda r: (r["fsx"]["pinned"].update(storage_capacity_gib=2400), r["fsx"].update(storage_capacity_gib=1200)),
        f"{R}.fsx.storage_capacity_gib",
    ),
    ("subnet", lambda r: r["network"].update(subnet_id="subnet-0ffffffffffffffff"), f"{R}.network.subnet_id"),
    (
        "created-vpc-cidr",
        lambda r: (r["network"].pop("subnet_id"), r["network"].update(vpc_cidr="10.1.0.0/16")),
        f"{R}.network",
    ),
    ("cluster-rename", lambda r: r.update(name="t2"), f"{R}.name"),
    (
        "lustre-version",
        lambda r: r["fsx"]["pinned"].update(file_system_type_version="2.12"),
        f"{R}.fsx.pinned.file_system_type_version",
    ),
    ("storage-type", lambda r: r["fsx"]["pinned"].update(storage_type="HDD"), f"{R}.fsx.pinned.storage_type"),
    (
        "copy-tags",
        lambda r: r["fsx"]["pinned"].update(copy_tags_to_backups=False),
        f"{R}.fsx.pinned.copy_tags_to_backups",
    ),
    (
        "s3-import-path",
        lambda r: (
            r["fsx"].update(
                deployment_type="SCRATCH_2",
                per_unit_storage_throughput=None,
                data_repository={"s3_uri": "s3://bucket-1/x"},
            ),
            r["fsx"]["pinned"].update(deployment_type="SCRATCH_2", copy_tags_to_backups=False),
        ),
        f"{R}.fsx.data_repository",
    ),
]


@pytest.mark.parametrize("mutate,path", [c[1:] for c in FORCE_NEW], ids=[c[0] for c in FORCE_NEW])
def test_edits_that_replace_the_file_system_are_refused(mutate, path):
    raw = pinned_raw()
    mutate(raw)
    lines = refusal(raw)
    hits = [ln for ln in lines if ln.startswith(f"{path}: ")]
    assert len(hits) == 1, lines
    assert "would replace the file system" in hits[0] and "fsx.allow_replace: true" in hits[0]


def test_every_pinned_value_has_a_refusal_case():
    """A new FsxIdentity field needs its own row in FORCE_NEW."""
    from model.fsx import FsxIdentity

    covered = {
        "fsx.deployment_type": "deployment_type",
        "fsx.storage_capacity_gib": "storage_capacity_gib",
        "network.subnet_id": "subnet",
        "network": "subnet",
        "name": "cluster_name",
        "fsx.data_repository": "s3_import_path",
    }
    fields = {covered.get(path.removeprefix(f"{R}."), path.rsplit(".", 1)[-1]) for _, _, path in FORCE_NEW}
    assert fields == set(FsxIdentity.model_fields)


def test_without_a_pin_protect_is_the_guard():
    raw = valid_raw()  # no fsx.pinned: first `pulumi up`
    raw["fsx"] = {"deployment_type": "PERSISTENT_1", "per_unit_storage_throughput": 200}
    run = run_program(raw)
    assert run.value["fsx_protected"] is True


def test_growing_storage_and_in_place_edits_are_allowed():
    raw = pinned_raw()
    raw["fsx"].update(storage_capacity_gib=2400, per_unit_storage_throughput=500, backup_retention_days=14)
    fs = run_program(raw).inputs(FS, "t1-lustre")
    assert (fs["storageCapacity"], fs["perUnitStorageThroughput"], fs["automaticBackupRetentionDays"]) == (
        2400,
        500,
        14,
    )


_LINK = {"s3_uri": "s3://my-training-data/datasets"}
_NO_BACKUPS = {"backup_retention_days": 0, "allow_no_backups": True}


def test_linking_s3_to_a_persistent2_is_in_place():
    """PERSISTENT_2 links through a data repository association: linking S3 later turns
    FSx backups off in place (FSx backs up no linked file system [FSX-CREATEBACKUP]) and
    changes nothing pinned, so the file system is kept."""
    raw = pinned_raw()
    pinned = dict(raw["fsx"]["pinned"])
    raw["fsx"].update(data_repository=_LINK, **_NO_BACKUPS)
    run = run_program(raw)
    fs = run.inputs(FS, "t1-lustre")
    assert (fs["automaticBackupRetentionDays"], fs["skipFinalBackup"], fs["copyTagsToBackups"]) == (0, True, True)
    assert run.value["fsx_identity"] == pinned
    assert run.value["fsx_protected"] is True


def test_linking_s3_to_a_persistent1_is_one_refusal():
    """PERSISTENT_1 links through its import path, which FSx sets only at creation, and
    a linked one is created without copy_tags_to_backups [FSX-CREATEFS-LUSTRE]: one
    refusal, at the key the operator edited."""
    raw = pinned_raw()
    raw["fsx"].update(deployment_type="PERSISTENT_1", per_unit_storage_throughput=200)
    raw["fsx"]["pinned"].update(deployment_type="PERSISTENT_1")
    assert fsx_identity(parse_config(copy.deepcopy(raw))).model_dump() == raw["fsx"]["pinned"]
    raw["fsx"].update(data_repository=_LINK, **_NO_BACKUPS)
    lines = refusal(raw)
    assert [ln.split(": ", 1)[0] for ln in lines] == [f"{R}.fsx.data_repository"], lines
    assert "s3_import_path None (fsx.pinned) and this config gives 's3://my-training-data/datasets'" in lines[0]


def test_allow_replace_lets_the_edit_through():
    raw = pinned_raw()
    raw["fsx"].update(deployment_type="PERSISTENT_1", per_unit_storage_throughput=200, allow_replace=True)
    run = run_program(raw)
    assert run.inputs(FS, "t1-lustre")["deploymentType"] == "PERSISTENT_1"
    assert run.value["fsx_protected"] is False  # protect lifted for this up
    assert run.value["fsx_identity"]["deployment_type"] == "PERSISTENT_1"  # the value to re-pin


def test_allow_replace_left_on_without_a_change_is_refused():
    raw = pinned_raw()
    raw["fsx"]["allow_replace"] = True
    (line,) = refusal(raw)
    assert line.startswith(f"{R}.fsx.allow_replace: nothing pinned changes, so nothing is replaced; remove it")


def test_security_group_description_does_not_name_the_cluster():
    """GroupDescription cannot be updated: a rename must not reach it."""
    a, b = valid_raw(), valid_raw()
    b["name"] = "other"
    sg = "aws:ec2/securityGroup:SecurityGroup"
    da = run_program(a).inputs(sg, "t1-sg")["description"]
    db = run_program(b).inputs(sg, "other-sg")["description"]
    assert da == db and "t1" not in da


# --- deploy requirements: block dates, pinned image ---------------------------------


def test_unpinned_image_is_refused_with_the_command_that_prints_the_id():
    raw = valid_raw()
    del raw["image"]
    (line,) = refusal(raw)
    assert line == (
        f"{R}.image.ami_id: required to deploy: pin the image so every node, including replacements, boots the "
        "same kernel; `python3 -m ops pin --stack <stack> --image` resolves "
        "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id in us-east-2 "
        "and prints the image.ami_id line (or set image.allow_unpinned: true to boot whatever the parameter names "
        "at each launch)"
    )
    raw["image"] = {"allow_unpinned": True}
    lt = run_program(raw).inputs("aws:ec2/launchTemplate:LaunchTemplate", "t1-lt")
    assert lt["imageId"] == (
        "resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
    )


def test_blocks_need_dates_to_deploy():
    raw = valid_raw()
    for key in ("start", "end"):
        del raw["capacity"]["capacity_blocks"][0][key]
    lines = refusal(raw)
    assert [ln.split(": ")[0] for ln in lines] == [
        f"{R}.capacity.capacity_blocks[0].start",
        f"{R}.capacity.capacity_blocks[0].end",
    ]
    assert "--capacity-reservation-ids cr-0123456789abcdef0" in lines[0]


def test_a_block_whose_nodes_stopped_is_refused():
    cfg = parse_config(valid_raw())
    late = datetime(2026, 12, 8, 10, 55, tzinfo=UTC)  # 5 minutes after the 10:50 scale-in
    (problem,) = deploy_problems(cfg, late, REGION)
    assert problem == (
        f"{R}.capacity.capacity_blocks[0].end",
        "block cr-0123456789abcdef0 ends at 2026-12-08T11:30:00Z and its nodes stop at "
        "2026-12-08T10:50:00Z (capacity.block_end_margin_minutes 40), which is past at "
        "2026-12-08T10:55:00Z; move to the next block: replace this entry with the new block "
        "(README, moving to the next block)",
    )
    assert deploy_problems(cfg, PLAN_NOW, REGION) == []


def test_a_run_within_the_lead_of_a_scale_in_is_refused():
    """A scale-in declared now could be created after its time (model.schedule D2 rule):
    the run is refused and says when it can run again."""
    cfg = parse_config(valid_raw())
    near = datetime(2026, 12, 8, 10, 20, tzinfo=UTC)  # 30 minutes before the 10:50 scale-in
    (problem,) = deploy_problems(cfg, near, REGION)
    assert problem == (
        f"{R}.capacity.capacity_blocks[0].end",
        "block cr-0123456789abcdef0 ends at 2026-12-08T11:30:00Z and its nodes stop at "
        "2026-12-08T10:50:00Z (capacity.block_end_margin_minutes 40), less than 45 minutes after "
        "2026-12-08T10:20:00Z: a scale-in action created now could reach Auto Scaling after its time, so "
        "this run changes nothing; the existing action still stops the nodes. Run again after "
        "2026-12-08T10:50:00Z with this entry removed (move to the next block: replace this entry with the "
        "new block (README, moving to the next block)), or extend the block and set its new end",
    )
    # 45 minutes and one second before: declared as usual.
    assert deploy_problems(cfg, datetime(2026, 12, 8, 10, 4, 59, tzinfo=UTC), REGION) == []


def test_on_demand_needs_no_dates():
    raw = valid_raw()
    raw["capacity"] = {"nodes": 3}
    run = run_program(raw)
    assert run.of_type(SCHED) == [] and run.inputs(ASG, "t1-workers")["desiredCapacity"] == 2


# --- in-program preflight (provider lookups -> model.preflight checks) ---------------


def _mocks(raw, **kw) -> PlanMocks:
    blocks = kw.pop("blocks", declared_blocks(raw))
    return PlanMocks(REGION, subnet_az=kw.pop("subnet_az", "us-east-2b"), blocks=blocks, **kw)


def test_preflight_reads_every_fact_through_provider_lookups():
    run = run_program(valid_raw())
    tokens = [c["token"] for c in run.calls]
    for token in (
        "aws:index/getAvailabilityZones:getAvailabilityZones",
        "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation",
        "aws:ec2/getSubnet:getSubnet",
        "aws:ec2/getRouteTable:getRouteTable",
        "aws:ec2/getVpc:getVpc",
    ):
        assert token in tokens
    assert {
        "token": "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation",
        "args": {"id": CR_A},
    } in run.calls


def test_preflight_reports_every_problem_before_any_resource():
    raw = valid_raw()
    block = declared_blocks(raw)[CR_A]
    mocks = _mocks(
        raw,
        blocks={
            CR_A: {
                **block,
                "state": "expired",
                "availabilityZone": "us-east-2a",
                "instanceType": "p5en.48xlarge",
                "endDate": "2026-11-30T11:30:00Z",
            }
        },
        default_route="igw-0123456789abcdef0",
        vpc_dns_support=False,
        zones=("us-east-2a", "us-east-2c"),
    )
    lines = refusal(raw, mocks)
    assert mocks.resources == [] or all(not r["custom"] for r in mocks.resources)
    paths = [ln.split(": ")[0] for ln in lines]
    assert paths == [
        f"{R}.capacity.capacity_blocks[0].reservation_id",  # expired
        f"{R}.capacity.capacity_blocks[0].reservation_id",  # instance type
        f"{R}.capacity.capacity_blocks[0].availability_zone",
        f"{R}.capacity.capacity_blocks[0].end",  # declared end differs from EC2's
        f"{R}.network.availability_zone",  # not a zone of the region
        f"{R}.network.subnet_id",  # public
        f"{R}.network.subnet_id",  # DNS off
    ], lines
    assert "block cr-0123456789abcdef0 is expired" in lines[0]
    assert "is public (0.0.0.0/0 goes to igw-0123456789abcdef0)" in lines[5]


def test_preflight_unknown_block_is_a_problem_at_its_id():
    raw = valid_raw()
    (line,) = refusal(raw, _mocks(raw, blocks={}))
    # The provider's "couldn't find resource" is a block EC2 does not know: the words of
    # `ops preflight` (model.preflight), not a failed lookup.
    assert line == (
        f"{R}.capacity.capacity_blocks[0].reservation_id: {CR_A} does not exist in this account in us-east-2; "
        "check the id and aws:region, or run `python3 -m ops find-blocks` to find and buy one"
    )


def test_preflight_subnet_without_egress():
    raw = valid_raw()
    (line,) = refusal(raw, _mocks(raw, default_route=None))
    assert line == (
        f"{R}.network.subnet_id: subnet-0a1b2c3d4e5f60718 has no 0.0.0.0/0 route; nodes need egress "
        "for SSM, S3 and image pulls: add a route to a NAT gateway"
    )


def test_preflight_refuses_a_pinned_ubuntu_2204_image():
    raw = valid_raw()
    name = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20260101"
    (line,) = refusal(raw, _mocks(raw, ami_names={"ami-0a1b2c3d4e5f60718": name}))
    assert line == (
        f"{R}.image.ami_id: ami-0a1b2c3d4e5f60718 is '{name}', an Ubuntu 22.04 image: its Slurm 21.08 "
        "has no dynamic nodes (slurmd -Z came in 22.05); pin an Ubuntu 24.04 DLAMI"
    )


def test_preflight_egress_through_a_transit_gateway_is_a_warning_not_an_error():
    raw = valid_raw()
    run = run_program(raw, mocks=_mocks(raw, default_route="tgw-0123456789abcdef0"))
    assert run.inputs(ASG, "t1-block-a")["name"] == "gpu-cluster-dev-block-a"
