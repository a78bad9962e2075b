"""The shipped stack files' example ids: recognised in one place, refused by both preflights.

`pulumi up` (the program's preflight, before any lookup or resource) and `python3 -m
ops preflight` (before any AWS call) refuse them with the key and the fix; the offline
plan still renders the shipped files as they are.
"""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path

import pulumi
import pytest
import yaml

from model.config import parse_config
from model.image import DLAMI_SSM_PARAMETER
from model.placeholders import EXAMPLE_VALUES, example_value_problems, is_example
from offline.mocks import run_under_mocks
from offline.plan import load_stack_config
from ops.cli import main
from tests.support.ops_stubs import Aws, context

REPO = Path(__file__).resolve().parents[2]
P = "gpu-cluster:cluster"
# Anything in a stack file that names a thing in an AWS account.
AWS_REFERENCE = re.compile(r"^(?:[a-z]+-[0-9a-f]{8,17}|s3://.+)$")

SUBNET_FIX = (
    "replace it with the id of your private subnet in us-east-2b (`aws ec2 describe-subnets --region us-east-2 "
    "--filters Name=availability-zone,Values=us-east-2b --query 'Subnets[].[SubnetId,VpcId,CidrBlock]' "
    "--output text`), or delete subnet_id to let the stack create a VPC"
)
PINNED_FIX = (
    "fsx.pinned records a file system that already exists: delete the whole fsx.pinned block before the first "
    "`pulumi up`, then pin the real one (`python3 -m ops pin --stack <stack> --fsx`)"
)


def _block_fix(region: str) -> str:
    return (
        "replace this block entry with the snippet `python3 -m ops find-blocks` prints for a Capacity Block you "
        f"bought (`aws ec2 describe-capacity-reservations --region {region} "
        "--filters Name=reservation-type,Values=capacity-block` lists yours)"
    )


def _ami_fix(region: str) -> str:
    return (
        "replace it with the line `python3 -m ops pin --stack <stack> --image` prints (the DLAMI of your region; "
        f"or `aws ssm get-parameter --region {region} --name {DLAMI_SSM_PARAMETER} --query Parameter.Value "
        "--output text`)"
    )


def _example(value: str, fix: str) -> str:
    return f"{value} is the example value from the shipped stack file; {fix}"


DEV_PROBLEMS = [
    (f"{P}.network.subnet_id", _example("subnet-0a1b2c3d4e5f60718", SUBNET_FIX)),
    (f"{P}.capacity.capacity_blocks[0].reservation_id", _example("cr-0123456789abcdef0", _block_fix("us-east-2"))),
    (f"{P}.fsx.pinned.subnet", _example("subnet-0a1b2c3d4e5f60718", PINNED_FIX)),
    (f"{P}.image.ami_id", _example("ami-0a1b2c3d4e5f60718", _ami_fix("us-east-2"))),
]
PROD_PROBLEMS = [
    (f"{P}.capacity.capacity_blocks[0].reservation_id", _example("cr-0aaaaaaaaaaaaaaa1", _block_fix("us-east-1"))),
    (f"{P}.capacity.capacity_blocks[1].reservation_id", _example("cr-0bbbbbbbbbbbbbbb2", _block_fix("us-east-1"))),
    (
        f"{P}.fsx.data_repository.s3_uri",
        _example(
            "s3://example-prod-training-data/datasets",
            "replace it with s3://<your-bucket>[/prefix] (`aws s3 ls` lists yours), or delete data_repository",
        ),
    ),
    (f"{P}.image.ami_id", _example("ami-0f1e2d3c4b5a69788", _ami_fix("us-east-1"))),
]
SMOKE_PROBLEMS = [(f"{P}.image.ami_id", _example("ami-0c0ffee0c0ffee0c0", _ami_fix("us-east-1")))]
EXPECTED = {"dev": DEV_PROBLEMS, "prod": PROD_PROBLEMS, "smoke": SMOKE_PROBLEMS}

# Values a user would paste from their own account.
REAL = {
    "subnet-0a1b2c3d4e5f60718": "subnet-07e3c41b9d2a58f60",
    "cr-0123456789abcdef0": "cr-05d1e9a3c7b24f681",
    "ami-0a1b2c3d4e5f60718": "ami-04c7e1b95a3d2f806",
}


def _strings(node):
    if isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, str):
        yield node


def _replace(node, mapping):
    if isinstance(node, dict):
        return {k: _replace(v, mapping) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace(v, mapping) for v in node]
    return mapping.get(node, node) if isinstance(node, str) else node


def test_example_values_are_exactly_the_ids_in_the_shipped_stack_files():
    found: dict[str, str] = {}
    for path in sorted(REPO.glob("Pulumi.*.yaml")):
        if path.name == "Pulumi.yaml":
            continue
        doc = yaml.safe_load(path.read_text())
        for value in _strings(doc["config"]):
            if AWS_REFERENCE.match(value):
                found.setdefault(value, path.name)
    assert found == EXAMPLE_VALUES


@pytest.mark.parametrize("stack", ["dev", "prod", "smoke"])
def test_each_example_value_is_refused_at_its_path(stack):
    raw, region = load_stack_config(stack)
    assert example_value_problems(parse_config(raw), region) == EXPECTED[stack]


def test_an_example_bucket_with_another_prefix_is_still_the_example():
    assert is_example("s3://example-prod-training-data/other")
    assert not is_example("s3://example-prod-training-data-2/datasets")
    assert not is_example("subnet-0a1b2c3d4e5f60719")


@pytest.mark.parametrize("stack", ["dev", "prod", "smoke"])
def test_program_preflight_refuses_the_shipped_stack_before_any_lookup(stack):
    raw, region = load_stack_config(stack)
    with pytest.raises(pulumi.RunError) as err:
        run_under_mocks(raw, region, stack=stack, allow_example_values=False)
    assert str(err.value).splitlines() == [f"{p}: {m}" for p, m in EXPECTED[stack]]


def test_program_preflight_declares_and_reads_nothing_when_refusing():
    from offline.mocks import PlanMocks, declared_blocks

    raw, region = load_stack_config("dev")
    mocks = PlanMocks(region, subnet_az="us-east-2b", blocks=declared_blocks(raw))
    with pytest.raises(pulumi.RunError):
        run_under_mocks(raw, region, mocks=mocks, allow_example_values=False)
    assert mocks.calls == [] and [r for r in mocks.resources if r["custom"]] == []


def test_real_looking_values_pass_the_check_and_the_program_runs():
    raw, region = load_stack_config("dev")
    mine = _replace(copy.deepcopy(raw), REAL)
    assert example_value_problems(parse_config(mine), region) == []
    mocks, _, outputs, _ = run_under_mocks(mine, region, allow_example_values=False)
    assert outputs["subnet_id"] == REAL["subnet-0a1b2c3d4e5f60718"]
    assert outputs["capacity_block_ids"] == [REAL["cr-0123456789abcdef0"]]
    # The real lookups ran (they are skipped only when an example is refused).
    assert {c["token"] for c in mocks.calls} >= {
        "aws:ec2/getSubnet:getSubnet",
        "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation",
        "aws:ec2/getAmi:getAmi",
    }


def test_one_replaced_value_leaves_the_others_refused():
    raw, region = load_stack_config("dev")
    mine = copy.deepcopy(raw)
    mine["network"]["subnet_id"] = REAL["subnet-0a1b2c3d4e5f60718"]
    del mine["fsx"]["pinned"]
    paths = [p for p, _ in example_value_problems(parse_config(mine), region)]
    assert paths == [f"{P}.capacity.capacity_blocks[0].reservation_id", f"{P}.image.ami_id"]


def test_the_offline_plan_still_renders_the_shipped_stacks(tmp_path):
    from offline.plan import main as plan_main

    for stack in ("dev", "prod", "smoke"):
        assert plan_main(["--stack", stack, "--out", str(tmp_path / stack)]) == 0
        assert (tmp_path / stack / "plan.json").is_file()


def test_ops_preflight_refuses_the_shipped_stack_without_calling_aws(tmp_path):
    shutil.copy(REPO / "Pulumi.dev.yaml", tmp_path / "Pulumi.dev.yaml")
    aws = Aws()
    ctx = context(aws)
    rc = main(["preflight", "--stack", "dev", "--stack-dir", str(tmp_path)], ctx=ctx, session_for=aws.session)
    assert rc == 2
    assert ctx.out.getvalue().splitlines() == [
        *(f"{p}: {m}" for p, m in DEV_PROBLEMS),
        "preflight dev: 4 config problem(s); fix the stack file first",
    ]
    assert aws.stubbers == {}  # no AWS client was even created


def test_ops_preflight_json_lists_the_example_values(tmp_path):
    import json

    shutil.copy(REPO / "Pulumi.prod.yaml", tmp_path / "Pulumi.prod.yaml")
    aws = Aws(region="us-east-1")
    ctx = context(aws)
    rc = main(
        ["preflight", "--stack", "prod", "--stack-dir", str(tmp_path), "--json"], ctx=ctx, session_for=aws.session
    )
    doc = json.loads(ctx.out.getvalue())
    assert rc == 2 and doc["ok"] is False
    assert [(p["path"], p["message"]) for p in doc["problems"]] == PROD_PROBLEMS


def test_readme_shows_the_refusal_as_preflight_prints_it():
    path, message = DEV_PROBLEMS[0]
    assert f"{path}: {message}" in (REPO / "README.md").read_text().splitlines()
