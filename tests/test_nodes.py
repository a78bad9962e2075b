"""Node groups: one ASG per group, pinned template version, block targeting, tags."""

from __future__ import annotations

import pulumi
import pytest

from model.config import CapacityBlock, NodeGroup
from infra.nodes import NodeGroups, NodeGroupsArgs
from tests.mocks import run_component

ASG = "aws:autoscaling/group:Group"
A = CapacityBlock(name="a", reservation_id="cr-0123456789abcdef0", instance_count=8, availability_zone="us-east-2b")
B = CapacityBlock(name="b", reservation_id="cr-0123456789abcdef1", instance_count=4, availability_zone="us-east-2b")


def _run(groups, total, version=3):
    def program():
        ng = NodeGroups("c1", NodeGroupsArgs(
            cluster_name="c1", groups=groups, total_nodes=total, subnet_id="subnet-0abc",
            launch_template_id="lt-0abc", launch_template_version=pulumi.Output.from_input(version),
            tags={"team": "ml"}))
        return ng.asg_names
    return run_component(program)


@pytest.fixture(scope="module")
def blocks():
    return _run([NodeGroup("controller", "controller", 1, A), NodeGroup("block-a", "worker", 7, A),
                 NodeGroup("block-b", "worker", 4, B)], total=12)


def test_children(blocks):
    assert blocks.custom() == [(ASG, "c1-block-a"), (ASG, "c1-block-b"), (ASG, "c1-controller")]
    for typ, name in blocks.custom():
        assert blocks.parent_type(typ, name) == "gpu-cluster:index:NodeGroups"
    assert blocks.value == {"controller": "gpu-cluster-c1-controller", "block-a": "gpu-cluster-c1-block-a",
                            "block-b": "gpu-cluster-c1-block-b"}


def test_size_subnet_template_pinned(blocks):
    for name, size in (("c1-controller", 1), ("c1-block-a", 7), ("c1-block-b", 4)):
        asg = blocks.inputs(ASG, name)
        assert (asg["minSize"], asg["maxSize"], asg["desiredCapacity"]) == (size, size, size)
        assert asg["vpcZoneIdentifiers"] == ["subnet-0abc"]
        # A number, never $Latest/$Default: Capacity Block groups must pin one, and a new
        # template version must not touch running nodes.
        assert asg["launchTemplate"] == {"id": "lt-0abc", "version": "3"}
        assert asg["healthCheckType"] == "EC2"
        assert asg["waitForCapacityTimeout"] == "0"
        assert asg["protectFromScaleIn"] is False
        assert "instanceRefresh" not in asg and "mixedInstancesPolicy" not in asg and "placementGroup" not in asg


def test_each_group_targets_its_block(blocks):
    def target(name):
        spec = blocks.inputs(ASG, name)["capacityReservationSpecification"]
        assert spec["capacityReservationPreference"] == "capacity-reservations-only"
        return spec["capacityReservationTarget"]["capacityReservationIds"]

    assert target("c1-controller") == ["cr-0123456789abcdef0"]
    assert target("c1-block-a") == ["cr-0123456789abcdef0"]
    assert target("c1-block-b") == ["cr-0123456789abcdef1"]


def test_tags_propagate_node_identity(blocks):
    def tags(name):
        return {t["key"]: (t["value"], t["propagateAtLaunch"]) for t in blocks.inputs(ASG, name)["tags"]}

    assert tags("c1-block-b") == {
        "GpuClusterName": ("c1", True), "GpuClusterRole": ("worker", True), "GpuClusterNodes": ("12", True),
        "GpuClusterBlock": ("b", True), "Name": ("c1-worker", True), "team": ("ml", True)}
    assert tags("c1-controller")["GpuClusterRole"] == ("controller", True)
    assert tags("c1-controller")["GpuClusterBlock"] == ("a", True)


def test_on_demand_and_empty_groups():
    run = _run([NodeGroup("controller", "controller", 1, None), NodeGroup("workers", "worker", 3, None),
                NodeGroup("block-x", "worker", 0, None)], total=4, version=1)
    assert run.custom() == [(ASG, "c1-controller"), (ASG, "c1-workers")]  # size 0: no group
    asg = run.inputs(ASG, "c1-workers")
    assert (asg["minSize"], asg["maxSize"], asg["desiredCapacity"]) == (3, 3, 3)
    assert "capacityReservationSpecification" not in asg
    assert asg["launchTemplate"]["version"] == "1"
    tags = {t["key"]: t["value"] for t in asg["tags"]}
    assert tags["GpuClusterBlock"] == "on-demand" and tags["GpuClusterNodes"] == "4"
