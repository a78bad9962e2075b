"""Node groups: one ASG per group, pinned template version, block placement, tags."""

from __future__ import annotations

import pulumi
import pytest

from infra.config import CapacityBlock, NodeGroup
from infra.nodes import NodeGroupArgs, NodeGroupAsg
from tests.mocks import run_component

ASG = "aws:autoscaling/group:Group"
BLOCK = CapacityBlock(name="a", reservation_id="cr-0123456789abcdef0", instance_count=8, availability_zone="us-east-2b")


def _run(group: NodeGroup, version=3):
    def program():
        ng = NodeGroupAsg(f"c1-{group.name}", NodeGroupArgs(
            cluster_name="c1", group=group, total_nodes=8, subnet_id="subnet-0abc",
            launch_template_id="lt-0abc", launch_template_version=pulumi.Output.from_input(version),
            tags={"team": "ml"}))
        return ng.asg_name
    return run_component(program)


@pytest.fixture(scope="module")
def worker():
    return _run(NodeGroup("block-a", "worker", 7, BLOCK))


def test_children(worker):
    assert worker.custom() == [(ASG, "c1-block-a-asg")]
    assert worker.parent_type(ASG, "c1-block-a-asg") == "gpu-cluster:index:NodeGroup"
    assert worker.value == "gpu-cluster-c1-block-a"


def test_size_subnet_template_pinned(worker):
    asg = worker.inputs(ASG, "c1-block-a-asg")
    assert (asg["minSize"], asg["maxSize"], asg["desiredCapacity"]) == (7, 7, 7)
    assert asg["vpcZoneIdentifiers"] == ["subnet-0abc"]
    # A number, never $Latest/$Default: Capacity Block groups must pin one, and a new
    # template version must not touch running nodes.
    assert asg["launchTemplate"] == {"id": "lt-0abc", "version": "3"}
    assert asg["healthCheckType"] == "EC2"
    assert asg["waitForCapacityTimeout"] == "0"
    assert asg["protectFromScaleIn"] is False
    assert "instanceRefresh" not in asg and "mixedInstancesPolicy" not in asg and "placementGroup" not in asg


def test_capacity_block_target(worker):
    asg = worker.inputs(ASG, "c1-block-a-asg")
    assert asg["capacityReservationSpecification"] == {
        "capacityReservationPreference": "capacity-reservations-only",
        "capacityReservationTarget": {"capacityReservationIds": ["cr-0123456789abcdef0"]}}


def test_tags_propagate_node_identity(worker):
    tags = {t["key"]: (t["value"], t["propagateAtLaunch"]) for t in worker.inputs(ASG, "c1-block-a-asg")["tags"]}
    assert tags == {
        "GpuClusterName": ("c1", True), "GpuClusterRole": ("worker", True), "GpuClusterNodes": ("8", True),
        "GpuClusterBlock": ("a", True), "Name": ("c1-worker", True), "team": ("ml", True)}


def test_on_demand_controller():
    run = _run(NodeGroup("controller", "controller", 1, None), version=1)
    asg = run.inputs(ASG, "c1-controller-asg")
    assert asg["name"] == "gpu-cluster-c1-controller"
    assert (asg["minSize"], asg["maxSize"], asg["desiredCapacity"]) == (1, 1, 1)
    assert "capacityReservationSpecification" not in asg
    tags = {t["key"]: t["value"] for t in asg["tags"]}
    assert tags["GpuClusterRole"] == "controller" and tags["GpuClusterBlock"] == "on-demand"
