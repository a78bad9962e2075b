"""The program reads where the live controller runs before a block-list edit can move it.

With `controller.placement: block` the config alone cannot see where the live
controller runs: going from blocks [a, b] (host a) to [b] alone makes b the host, b's
group shrinks by one and Auto Scaling terminates a running worker. So the program looks
up the controller group by its fixed name (infra/preflight.py controller_move_problems),
and refuses before anything is declared when the host's live group would shrink. The
live groups are PlanMocks(groups=...), answered as the provider answers the Auto Scaling
data sources; a lookup that fails is a `path: message` RunError like every other lookup.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pulumi
import pytest

from offline.mocks import PlanMocks, declared_blocks
from tests.support.mocks import REGION, run_program, valid_raw

R = "gpu-cluster:cluster"
CR_A, CR_B = "cr-0123456789abcdef0", "cr-0fedcba9876543210"
CTL, GROUP_A, GROUP_B = "gpu-cluster-dev-controller", "gpu-cluster-dev-block-a", "gpu-cluster-dev-block-b"
GET_GROUPS = "aws:autoscaling/getAmiIds:getAmiIds"
GET_GROUP = "aws:autoscaling/getGroup:getGroup"
# Block a runs 2026-12-01..08, b 2026-12-02..09: both have started at NOW.
NOW = datetime(2026, 12, 3, 0, 0, tzinfo=UTC)
DENIED = (
    "operation error Auto Scaling: DescribeAutoScalingGroups, https response error StatusCode: 403, "
    "RequestID: 0f0e0d0c-0b0a-0908-0706-050403020100, api error AccessDenied: User: "
    "arn:aws:iam::123456789012:user/ci is not authorized to perform: autoscaling:DescribeAutoScalingGroups"
)


def _raw(blocks: str, controller: dict | None = None) -> dict:
    raw = valid_raw()
    b = {**raw["capacity"]["capacity_blocks"][0], "name": "b", "reservation_id": CR_B}
    b.update(start="2026-12-02T11:30:00Z", end="2026-12-09T11:30:00Z")
    chosen = [x for x in (raw["capacity"]["capacity_blocks"][0], b) if x["name"] in blocks]
    raw["capacity"] = {"nodes": 2 * len(chosen), "capacity_blocks": chosen}
    if controller is not None:
        raw["controller"] = controller
    return raw


def _group(block: str, desired: int, role: str = "worker") -> dict:
    tags = {"GpuClusterBlock": block, "GpuClusterRole": role, "GpuClusterName": "t1"}
    return {
        "desiredCapacity": desired,
        "minSize": desired,
        "maxSize": desired,
        "tags": [{"key": k, "value": v, "propagateAtLaunch": True} for k, v in sorted(tags.items())],
    }


def _mocks(raw: dict, groups: dict, fail: dict | None = None) -> PlanMocks:
    return PlanMocks(REGION, subnet_az="us-east-2b", blocks=declared_blocks(raw, NOW), groups=groups, fail_invokes=fail)


def refused(raw: dict, groups: dict, fail: dict | None = None) -> list[str]:
    mocks = _mocks(raw, groups, fail)
    with pytest.raises(pulumi.RunError) as exc:
        run_program(raw, mocks=mocks, now=NOW)
    assert not any(r["custom"] for r in mocks.resources), "nothing may be declared after a refusal"
    return str(exc.value).splitlines()


def _sizes(raw: dict, groups: dict) -> dict[str, int]:
    run = run_program(raw, mocks=_mocks(raw, groups), now=NOW)
    return {
        r["inputs"]["name"]: r["inputs"]["desiredCapacity"]
        for r in run.resources
        if r["type"] == "aws:autoscaling/group:Group"
    }


# [a, b] deployed with the controller in a; both blocks running at full size.
RUNNING_IN_A = {CTL: _group("a", 1, "controller"), GROUP_A: _group("a", 1), GROUP_B: _group("b", 2)}


def test_dropping_the_host_block_refuses_the_implicit_move_into_a_running_block():
    assert refused(_raw("b"), {CTL: _group("a", 0, "controller"), GROUP_B: _group("b", 2)}) == [
        f"{R}.controller.block: the controller would move from block 'a' (where the live controller group "
        "runs) into block 'b' (it is the only block left), whose group runs 2 nodes: giving one of them to "
        "the controller shrinks it to 1, and Auto Scaling terminates a running worker of block 'b' chosen by "
        "its termination policy, not by Slurm. Nothing was changed; choose one: list block 'a' again with "
        "controller.block: a if it has not ended, set controller.block to a block that has not started, or "
        "set controller.placement: dedicated (recommended: a small instance that outlives blocks and takes "
        "no block slot)"
    ]


def test_naming_a_running_block_as_the_new_host_is_refused_too():
    (line,) = refused(_raw("ab", {"block": "b"}), RUNNING_IN_A)
    assert line.startswith(
        f"{R}.controller.block: the controller would move from block 'a' (where the live controller group "
        "runs) into block 'b' (controller.block names it), whose group runs 2 nodes"
    )
    assert "keep controller.block: a until block 'a' ends" in line


def test_going_back_from_a_dedicated_controller_into_a_running_block_is_refused():
    (line,) = refused(_raw("a"), {CTL: _group("on-demand", 1, "controller"), GROUP_A: _group("a", 2)})
    assert "from its own instance (the live controller group is in no block) into block 'a'" in line
    assert "keep controller.placement: dedicated" in line


def test_a_first_deployment_has_no_controller_group_and_passes():
    assert _sizes(_raw("b"), {}) == {CTL: 1, GROUP_B: 1}


def test_the_controller_staying_in_its_block_passes():
    assert _sizes(_raw("ab", {"block": "a"}), RUNNING_IN_A) == {CTL: 1, GROUP_A: 1, GROUP_B: 2}


def test_a_move_into_a_block_whose_group_does_not_shrink_passes():
    """b's group does not exist yet (b is new in the list): created at its size, no worker
    to terminate. And a host with a free slot: capacity.nodes raised with the move."""
    assert _sizes(_raw("ab", {"block": "b"}), {CTL: _group("a", 1, "controller"), GROUP_A: _group("a", 2)}) == {
        CTL: 1,
        GROUP_A: 2,
        GROUP_B: 1,
    }
    raw = _raw("b")
    raw["capacity"]["capacity_blocks"][0]["instance_count"] = 3
    raw["capacity"]["nodes"] = 3
    assert _sizes(raw, {CTL: _group("a", 0, "controller"), GROUP_B: _group("b", 2)}) == {CTL: 1, GROUP_B: 2}


def test_a_dedicated_controller_reads_no_group():
    raw = _raw("b", {"placement": "dedicated"})
    run = run_program(raw, mocks=_mocks(raw, RUNNING_IN_A), now=NOW)
    assert not [c for c in run.calls if c["token"] in (GET_GROUPS, GET_GROUP)]


def test_the_lookup_reads_the_controller_group_by_its_fixed_name():
    raw = _raw("b")
    run = run_program(raw, mocks=_mocks(raw, {}), now=NOW)
    assert [c["args"] for c in run.calls if c["token"] == GET_GROUPS] == [{"names": [CTL]}]


def test_a_lookup_that_is_denied_names_the_permission():
    assert refused(_raw("b"), RUNNING_IN_A, fail={GET_GROUPS: DENIED}) == [
        f"{R}.controller.block: could not read the Auto Scaling groups of this stack ({CTL}, {GROUP_B}) in "
        f"us-east-2: access denied ({DENIED}); the identity that runs pulumi needs "
        "autoscaling:DescribeAutoScalingGroups: grant it, or run with credentials that have it"
    ]


def test_a_lookup_that_fails_otherwise_says_to_run_again():
    why = "operation error Auto Scaling: DescribeAutoScalingGroups, exceeded maximum number of attempts, 25"
    assert refused(_raw("b"), RUNNING_IN_A, fail={GET_GROUP: why}) == [
        f"{R}.controller.block: could not read the Auto Scaling groups of this stack ({CTL}, {GROUP_B}) in "
        f"us-east-2: {why}; run again: the program reads where the live controller runs before it can move it"
    ]
