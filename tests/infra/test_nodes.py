"""Node groups: one ASG per group, pinned template version, block targeting, tags,
and the block schedule (zero before the start, scheduled actions at start and end)."""

from __future__ import annotations

from datetime import UTC, datetime

import pulumi
import pytest

from infra.nodes import NodeGroups, NodeGroupsArgs
from model.capacity import CapacityBlock, NodeGroup
from model.schedule import block_schedule
from tests.support.mocks import run_component

ASG = "aws:autoscaling/group:Group"
SCHED = "aws:autoscaling/schedule:Schedule"

# Both blocks have started at NOW (the groups run at full size); C starts later.
NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
A = CapacityBlock(
    name="a",
    reservation_id="cr-0123456789abcdef0",
    instance_count=8,
    availability_zone="us-east-2b",
    start="2026-12-01T11:30:00Z",
    end="2026-12-08T11:30:00Z",
)
B = CapacityBlock(
    name="b",
    reservation_id="cr-0123456789abcdef1",
    instance_count=4,
    availability_zone="us-east-2b",
    start="2026-12-02T08:00:00Z",
    end="2026-12-16T11:30:00Z",
)
C = CapacityBlock(
    name="c",
    reservation_id="cr-0123456789abcdef2",
    instance_count=4,
    availability_zone="us-east-2b",
    start="2026-12-05T11:30:00Z",
    end="2026-12-12T11:30:00Z",
)


def _run(groups, total, version=3, now=NOW, margin=40):
    def program():
        ng = NodeGroups(
            "c1",
            NodeGroupsArgs(
                cluster_name="c1",
                groups=groups,
                total_nodes=total,
                subnet_id="subnet-0abc",
                launch_template_id="lt-0abc",
                launch_template_version=pulumi.Output.from_input(version),
                controller_launch_template_id="lt-0ctl",
                controller_launch_template_version=pulumi.Output.from_input(version + 10),
                schedule=block_schedule(groups, margin, now) if now is not None else None,
                tags={"team": "ml"},
            ),
        )
        return ng.asg_names

    return run_component(program)


@pytest.fixture(scope="module")
def blocks():
    return _run(
        [
            NodeGroup("controller", "controller", 1, A),
            NodeGroup("block-a", "worker", 7, A),
            NodeGroup("block-b", "worker", 4, B),
        ],
        total=12,
    )


def test_children(blocks):
    assert blocks.custom() == [
        (ASG, "c1-block-a"),
        (ASG, "c1-block-b"),
        (ASG, "c1-controller"),
        (SCHED, "c1-block-a-scale-in"),
        (SCHED, "c1-block-b-scale-in"),
        (SCHED, "c1-controller-scale-in"),
    ]
    for typ, name in blocks.custom():
        assert blocks.parent_type(typ, name) == "gpu-cluster:index:NodeGroups"
    assert blocks.value == {
        "controller": "gpu-cluster-c1-controller",
        "block-a": "gpu-cluster-c1-block-a",
        "block-b": "gpu-cluster-c1-block-b",
    }


def test_size_subnet_template_pinned(blocks):
    for name, size in (("c1-controller", 1), ("c1-block-a", 7), ("c1-block-b", 4)):
        asg = blocks.inputs(ASG, name)
        assert (asg["minSize"], asg["maxSize"], asg["desiredCapacity"]) == (size, size, size)
        assert asg["vpcZoneIdentifiers"] == ["subnet-0abc"]
        # A number, never $Latest/$Default: Capacity Block groups must pin one, and a new
        # template version must not touch running nodes. The controller group launches
        # from the controller's own template.
        want = {"id": "lt-0ctl", "version": "13"} if name == "c1-controller" else {"id": "lt-0abc", "version": "3"}
        assert asg["launchTemplate"] == want
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
        "GpuClusterName": ("c1", True),
        "GpuClusterRole": ("worker", True),
        "GpuClusterNodes": ("12", True),
        "GpuClusterBlock": ("b", True),
        "GpuClusterBlockEnd": ("2026-12-16T11:30:00Z", True),
        "Name": ("c1-worker", True),
        "team": ("ml", True),
    }
    assert tags("c1-controller")["GpuClusterRole"] == ("controller", True)
    assert tags("c1-controller")["GpuClusterBlock"] == ("a", True)
    assert tags("c1-controller")["GpuClusterBlockEnd"] == ("2026-12-08T11:30:00Z", True)


def test_on_demand_and_empty_groups():
    run = _run(
        [
            NodeGroup("controller", "controller", 1, None),
            NodeGroup("workers", "worker", 3, None),
            NodeGroup("block-x", "worker", 0, None),
        ],
        total=4,
        version=1,
    )
    assert run.custom() == [(ASG, "c1-controller"), (ASG, "c1-workers")]  # size 0: no group
    asg = run.inputs(ASG, "c1-workers")
    assert (asg["minSize"], asg["maxSize"], asg["desiredCapacity"]) == (3, 3, 3)
    assert "capacityReservationSpecification" not in asg
    assert asg["launchTemplate"]["version"] == "1"
    tags = {t["key"]: t["value"] for t in asg["tags"]}
    assert tags["GpuClusterBlock"] == "on-demand" and tags["GpuClusterNodes"] == "4"
    assert "GpuClusterBlockEnd" not in tags  # on-demand nodes have no end


def _scheds(run):
    return {r["name"]: r["inputs"] for r in run.of_type(SCHED)}


def test_started_blocks_scale_to_zero_margin_before_their_end(blocks):
    """Started blocks run at size now; one action each, to zero 40 minutes before the end."""
    s = _scheds(blocks)
    assert s == {
        "c1-controller-scale-in": {
            "autoscalingGroupName": "gpu-cluster-c1-controller",
            "desiredCapacity": 0,
            "maxSize": 0,
            "minSize": 0,
            "scheduledActionName": "gpu-cluster-block-a-end",
            "startTime": "2026-12-08T10:50:00Z",
        },
        "c1-block-a-scale-in": {
            "autoscalingGroupName": "gpu-cluster-c1-block-a",
            "desiredCapacity": 0,
            "maxSize": 0,
            "minSize": 0,
            "scheduledActionName": "gpu-cluster-block-a-end",
            "startTime": "2026-12-08T10:50:00Z",
        },
        "c1-block-b-scale-in": {
            "autoscalingGroupName": "gpu-cluster-c1-block-b",
            "desiredCapacity": 0,
            "maxSize": 0,
            "minSize": 0,
            "scheduledActionName": "gpu-cluster-block-b-end",
            "startTime": "2026-12-16T10:50:00Z",
        },
    }
    for name in s:
        assert blocks.parent_type(SCHED, name) == "gpu-cluster:index:NodeGroups"


def test_block_not_started_is_created_at_zero_with_a_scale_out_action():
    run = _run([NodeGroup("controller", "controller", 1, C), NodeGroup("block-c", "worker", 3, C)], total=4, margin=60)
    for name in ("c1-controller", "c1-block-c"):
        asg = run.inputs(ASG, name)
        assert (asg["minSize"], asg["maxSize"], asg["desiredCapacity"]) == (0, 0, 0)
    s = _scheds(run)
    assert sorted(s) == [
        "c1-block-c-scale-in",
        "c1-block-c-scale-out",
        "c1-controller-scale-in",
        "c1-controller-scale-out",
    ]
    out = s["c1-block-c-scale-out"]
    assert (out["startTime"], out["minSize"], out["maxSize"], out["desiredCapacity"]) == (
        "2026-12-05T11:30:00Z",
        3,
        3,
        3,
    )
    assert (s["c1-controller-scale-out"]["desiredCapacity"], s["c1-controller-scale-out"]["scheduledActionName"]) == (
        1,
        "gpu-cluster-block-c-start",
    )
    assert s["c1-block-c-scale-in"]["startTime"] == "2026-12-12T10:30:00Z"  # margin 60
    assert "recurrence" not in out  # one-time actions


def test_a_block_starting_within_the_lead_counts_as_started():
    """Auto Scaling refuses actions in the past; a start 5 minutes away is treated as started."""
    run = _run(
        [NodeGroup("controller", "controller", 1, C), NodeGroup("block-c", "worker", 3, C)],
        total=4,
        now=datetime(2026, 12, 5, 11, 25, tzinfo=UTC),
    )
    assert run.inputs(ASG, "c1-block-c")["desiredCapacity"] == 3
    assert sorted(_scheds(run)) == ["c1-block-c-scale-in", "c1-controller-scale-in"]


def test_capacity_block_groups_need_a_time():
    with pytest.raises(Exception, match="schedule is required"):
        _run([NodeGroup("controller", "controller", 1, A)], total=2, now=None)


def test_on_demand_groups_have_no_schedule():
    run = _run(
        [NodeGroup("controller", "controller", 1, None), NodeGroup("workers", "worker", 3, None)], total=4, now=None
    )
    assert run.of_type(SCHED) == []


def test_dedicated_controller_group_is_on_demand_from_its_own_template():
    """controller.placement dedicated: the controller group names no block, launches from
    the controller's template, carries the on-demand block tag; the blocks keep every node."""
    run = _run(
        [NodeGroup("controller", "controller", 1, None), NodeGroup("block-a", "worker", 8, A)],
        total=8,
    )
    ctl = run.inputs(ASG, "c1-controller")
    assert "capacityReservationSpecification" not in ctl
    assert ctl["launchTemplate"] == {"id": "lt-0ctl", "version": "13"}
    assert (ctl["minSize"], ctl["maxSize"], ctl["desiredCapacity"]) == (1, 1, 1)
    assert ctl["vpcZoneIdentifiers"] == ["subnet-0abc"]
    tags = {t["key"]: t["value"] for t in ctl["tags"]}
    assert (tags["GpuClusterRole"], tags["GpuClusterBlock"], tags["GpuClusterNodes"]) == (
        "controller",
        "on-demand",
        "8",
    )
    assert "GpuClusterBlockEnd" not in tags
    assert run.inputs(ASG, "c1-block-a")["desiredCapacity"] == 8
    # no scheduled action follows a block for the controller: it outlives every block
    assert [n for t, n in run.custom() if t == SCHED] == ["c1-block-a-scale-in"]
