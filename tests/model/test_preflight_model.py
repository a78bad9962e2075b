"""model/preflight.py: the pure checks, table-driven over plain facts (no AWS, no boto3)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from model.capacity import CapacityBlock
from model.config import parse_config
from model.preflight import (
    BlockFacts,
    NameFacts,
    PreflightFacts,
    QuotaFacts,
    SubnetFacts,
    asg_name,
    errors,
    fixed_names,
    launch_template_name,
    preflight_findings,
)
from tests.support.ops_stubs import NOW

CR = "cr-0123456789abcdef0"
P = "gpu-cluster:cluster"
BASE = {
    "name": "dev",
    "instance_type": "p5.48xlarge",
    "network": {"availability_zone": "us-east-2b", "subnet_id": "subnet-0a1b2c3d4e5f60718"},
    "capacity": {
        "nodes": 2,
        "capacity_blocks": [
            {"name": "a", "reservation_id": CR, "instance_count": 2, "availability_zone": "us-east-2b"}
        ],
    },
}
ON_DEMAND = {**BASE, "capacity": {"nodes": 4}}


def good_block(**kw) -> BlockFacts:
    base = dict(
        reservation_id=CR,
        found=True,
        state="scheduled",
        reservation_type="capacity-block",
        instance_type="p5.48xlarge",
        availability_zone="us-east-2b",
        total_instance_count=2,
        start=NOW + timedelta(days=2),
        end=NOW + timedelta(days=9),
    )
    return BlockFacts(**{**base, **kw})


def facts(**kw) -> PreflightFacts:
    base = dict(
        region="us-east-2",
        now=NOW,
        region_zones=("us-east-2a", "us-east-2b"),
        blocks={CR: good_block()},
        subnet=SubnetFacts("subnet-0a1b2c3d4e5f60718", True, "us-east-2b", "vpc-1", "nat-1", True),
        quota=QuotaFacts("L-417A185B", "Running On-Demand P instances", 384.0),
    )
    return PreflightFacts(**{**base, **kw})


def lines(raw, f):
    return [x.line() for x in preflight_findings(parse_config(raw), f)]


def test_clean_scheduled_block_has_no_finding():
    assert lines(BASE, facts()) == []


@pytest.mark.parametrize(
    "block, expected",
    [
        (
            good_block(reservation_type="default"),
            f"{P}.capacity.capacity_blocks[0].reservation_id: {CR} is a 'default' Capacity Reservation, not a Capacity Block; "
            "the launch template uses market type capacity-block, so give the id of a Capacity Block",
        ),
        (
            good_block(state="active", end=NOW - timedelta(minutes=1)),
            f"{P}.capacity.capacity_blocks[0].reservation_id: block {CR} ended at 2026-12-01T11:59:00Z; run `python3 -m ops "
            "find-blocks` to find and buy one and replace this entry",
        ),
        (
            good_block(state="payment-pending"),
            f"{P}.capacity.capacity_blocks[0].reservation_id: block {CR} is payment-pending, not scheduled or active; no node "
            "can launch into it: run `python3 -m ops find-blocks` to find and buy one and replace this entry",
        ),
    ],
)
def test_each_bad_block_fact(block, expected):
    assert lines(BASE, facts(blocks={CR: block})) == [expected]


def test_egress_other_than_nat_is_a_warning_only():
    f = facts(subnet=SubnetFacts("subnet-0a1b2c3d4e5f60718", True, "us-east-2b", "vpc-1", "tgw-1", True))
    found = preflight_findings(parse_config(BASE), f)
    assert [x.severity for x in found] == ["warning"] and errors(found) == []
    assert found[0].message.startswith("0.0.0.0/0 of subnet-0a1b2c3d4e5f60718 goes to tgw-1, not a NAT gateway")


def test_quota_shortfall_refuses_on_demand_clusters():
    f = facts(blocks={}, quota=QuotaFacts("L-417A185B", "Running On-Demand P instances", 576.0))
    assert lines(ON_DEMAND, f) == [
        f"{P}.capacity.nodes: 4 x p5.48xlarge need 768 vCPUs but the Running On-Demand P instances quota (L-417A185B) "
        "in us-east-2 is 576; request an increase in Service Quotas"
    ]


def test_name_tagged_for_another_cluster_collides():
    f = facts(
        names=(
            NameFacts("launch template", "gpu-cluster-dev", True, "prod"),
            NameFacts("Auto Scaling group", "gpu-cluster-dev-controller", True, "dev"),
            NameFacts("Auto Scaling group", "gpu-cluster-dev-block-a", False),
        )
    )
    assert lines(BASE, f) == [
        f"{P}.name: launch template gpu-cluster-dev already exists in us-east-2 (tagged GpuClusterName=prod); choose "
        "another cluster name, or delete it if nothing uses it"
    ]


def test_lookup_errors_are_problems_and_unread_facts_are_not_guessed():
    f = facts(
        blocks={},
        subnet=None,
        region_zones=None,
        quota=None,
        lookup_errors=((f"{P}.network.subnet_id", "could not check: x"),),
    )
    assert lines(BASE, f) == [f"{P}.network.subnet_id: could not check: x"]


def test_fixed_names_are_the_names_the_program_uses():
    from infra import nodes

    cfg = parse_config(BASE)
    assert fixed_names(cfg) == [
        ("launch template", "gpu-cluster-dev"),
        ("launch template", "gpu-cluster-dev-controller"),
        ("Auto Scaling group", "gpu-cluster-dev-controller"),
        ("Auto Scaling group", "gpu-cluster-dev-block-a"),
    ]
    assert asg_name("dev", "block-a") == nodes.asg_name("dev", "block-a")
    assert launch_template_name("x") == "gpu-cluster-x"
    # Parsed for a stack, the names follow the stack (tests/model/test_stack_names.py runs the
    # program and compares these with the names it declares).
    staging = parse_config(BASE, stack="staging")
    assert fixed_names(staging) == [
        ("launch template", "gpu-cluster-staging"),
        ("launch template", "gpu-cluster-staging-controller"),
        ("Auto Scaling group", "gpu-cluster-staging-controller"),
        ("Auto Scaling group", "gpu-cluster-staging-block-a"),
    ]


@pytest.mark.skipif("start" not in CapacityBlock.model_fields, reason="block start/end not in the config schema yet")
def test_declared_dates_must_match_the_block():
    raw = {
        **BASE,
        "capacity": {
            "nodes": 2,
            "capacity_blocks": [
                {
                    **BASE["capacity"]["capacity_blocks"][0],
                    "start": "2026-12-03T11:30:00Z",
                    "end": "2026-12-10T11:30:00Z",
                }
            ],
        },
    }
    f = facts(
        blocks={
            CR: good_block(start=NOW.replace(day=3, hour=11, minute=30), end=NOW.replace(day=9, hour=11, minute=30))
        }
    )
    assert lines(raw, f) == [
        f"{P}.capacity.capacity_blocks[0].end: block {CR} ends at 2026-12-09T11:30:00Z, earlier than the declared "
        "2026-12-10T11:30:00Z (an end never moves earlier: is this entry's reservation id another block?); EC2 "
        "terminates its instances 30 minutes before 2026-12-09T11:30:00Z, so declare that end: pulumi config set "
        f"--path '{P}.capacity.capacity_blocks[0].end' '2026-12-09T11:30:00Z' (or in the stack file: "
        "end: '2026-12-09T11:30:00Z')"
    ]


def test_image_refusal_one_rule_for_program_and_ops():
    from model.preflight import image_refusal

    assert (
        image_refusal(
            "ami-1", "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) 20261120", architecture="x86_64"
        )
        is None
    )
    assert "Slurm 21.08 has no dynamic nodes" in image_refusal(
        "ami-2", "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20261120"
    )
    assert image_refusal("ami-3", "dlami arm", architecture="arm64") == (
        "ami-3 is 'dlami arm', an arm64 image; the GPU instance types are x86_64: pin an x86_64 DLAMI"
    )
