"""Two stacks in one account: AWS names the program fixes cannot collide, even when
Pulumi.dev.yaml is copied to Pulumi.staging.yaml without renaming anything.

Fixed names (launch template, Auto Scaling groups) derive from the stack name; every
other named resource is auto-named by Pulumi (a random suffix). Under the mocks an
auto-named resource has no name input at all, so the explicit name inputs are exactly
the names the program fixes.
"""

from __future__ import annotations

import copy

import pytest

from model.config import parse_config
from model.preflight import fixed_names
from offline.mocks import run_under_mocks
from tests.support.mocks import stack_config

LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
SCHED = "aws:autoscaling/schedule:Schedule"
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
DASHBOARD = "aws:cloudwatch/dashboard:Dashboard"
# Input keys that carry a resource's own AWS physical name (elsewhere `bucket` names the
# bucket an object or setting belongs to).
NAME_INPUTS = ("name", "bucket", "dashboardName")
# Resources whose names are unique per account or region; the program must not fix them.
AUTO_NAMED = (
    "aws:iam/role:Role",
    "aws:iam/instanceProfile:InstanceProfile",
    "aws:s3/bucket:Bucket",
    "aws:ec2/placementGroup:PlacementGroup",
    "aws:ec2/securityGroup:SecurityGroup",
)


def _run(raw, region, stack):
    mocks, _, outputs, node_files = run_under_mocks(copy.deepcopy(raw), region, stack=stack)
    return mocks.resources, outputs, node_files


def _physical_names(resources) -> set[tuple[str, str]]:
    names = set()
    for r in resources:
        if not r["custom"]:
            continue
        for key in NAME_INPUTS:
            if key == "bucket" and r["type"] != "aws:s3/bucket:Bucket":
                continue
            if key in r["inputs"]:
                names.add((r["type"], r["inputs"][key]))
        if r["type"] == SCHED:
            # Action names are unique within their group only.
            names.add((SCHED, f"{r['inputs']['autoscalingGroupName']}/{r['inputs']['scheduledActionName']}"))
    return names


@pytest.fixture(scope="module")
def copied():
    """Pulumi.dev.yaml as it is, deployed as stack dev and (copied) as stack staging."""
    raw, region = stack_config("dev")
    return _run(raw, region, "dev"), _run(raw, region, "staging")


def test_copied_stack_file_fixes_no_name_of_the_original(copied):
    (dev, _, _), (staging, _, _) = copied
    dev_names, staging_names = _physical_names(dev), _physical_names(staging)
    assert {t for t, _ in dev_names} == {LT, ASG, SCHED, LOG_GROUP, DASHBOARD}
    assert dev_names.isdisjoint(staging_names), dev_names & staging_names
    assert sorted(n for t, n in staging_names if t in (LT, ASG)) == [
        "gpu-cluster-staging",
        "gpu-cluster-staging-block-a",
        "gpu-cluster-staging-controller",  # the controller's group
        "gpu-cluster-staging-controller",  # and its own launch template
    ]
    # the log group and dashboard (model/logs.py) are named from the stack too
    assert sorted(n for t, n in staging_names if t in (LOG_GROUP, DASHBOARD)) == [
        "/gpu-cluster/staging",
        "gpu-cluster-staging",
    ]
    # The original stack keeps the names it always had.
    assert sorted(n for t, n in dev_names if t in (LT, ASG)) == [
        "gpu-cluster-dev",
        "gpu-cluster-dev-block-a",
        "gpu-cluster-dev-controller",  # the controller's group
        "gpu-cluster-dev-controller",  # and its own launch template
    ]


def test_account_unique_resources_are_auto_named(copied):
    (dev, _, _), _ = copied
    seen = {r["type"] for r in dev if r["type"] in AUTO_NAMED}
    assert seen == {t for t in AUTO_NAMED if t != "aws:ec2/placementGroup:PlacementGroup"}  # dev uses blocks
    for r in dev:
        if r["type"] in AUTO_NAMED:
            assert not set(NAME_INPUTS) & set(r["inputs"]), (r["type"], r["inputs"])
    bucket = next(r for r in dev if r["type"] == "aws:s3/bucket:Bucket")
    assert bucket["inputs"]["bucketPrefix"] == "gpu-cluster-dev-"  # plus a unique suffix


def test_on_demand_placement_group_is_auto_named():
    raw, region = stack_config("dev")
    raw["capacity"] = {"nodes": 3}
    resources, _, _ = _run(raw, region, "staging")
    (pg,) = [r for r in resources if r["type"] == "aws:ec2/placementGroup:PlacementGroup"]
    assert "name" not in pg["inputs"]


def test_copied_stack_keeps_the_cluster_name_for_slurm_and_fsx(copied):
    """Slurm's ClusterName and the /fsx paths stay the cluster name (each stack has its
    own file system and controller, so they do not meet)."""
    _, (_, outputs, node_files) = copied
    assert outputs["cluster_name"] == "dev"
    assert outputs["controller_asg_name"] == "gpu-cluster-staging-controller"
    assert outputs["validation_results_path"] == "/fsx/.gpu-cluster/dev/validation/"
    assert b"ClusterName=dev\n" in node_files.files["/opt/gpu-cluster/templates/slurm.conf"]


def test_cluster_name_defaults_to_the_stack_name():
    raw, region = stack_config("dev")
    del raw["name"]
    raw["fsx"].pop("pinned")  # a new stack has no file system to pin yet
    resources, outputs, node_files = _run(raw, region, "staging")
    assert outputs["cluster_name"] == "staging"
    assert outputs["validation_results_path"] == "/fsx/.gpu-cluster/staging/validation/"
    assert b"ClusterName=staging\n" in node_files.files["/opt/gpu-cluster/templates/slurm.conf"]
    asgs = sorted(r["inputs"]["name"] for r in resources if r["type"] == ASG)
    assert asgs == ["gpu-cluster-staging-block-a", "gpu-cluster-staging-controller"]


@pytest.mark.parametrize("stack", ["dev", "staging"])
def test_preflight_checks_the_names_the_program_declares(stack):
    """`ops preflight` looks for collisions on fixed_names(): the same names the program
    declares for that stack."""
    raw, region = stack_config("dev")
    resources, _, _ = _run(raw, region, stack)
    declared = sorted(r["inputs"]["name"] for r in resources if r["type"] in (LT, ASG))
    assert sorted(n for _, n in fixed_names(parse_config(copy.deepcopy(raw), stack=stack))) == declared
