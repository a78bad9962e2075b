"""The example values in the shipped stack files, refused before anything talks to AWS.

`Pulumi.dev.yaml` and `Pulumi.prod.yaml` show a complete, valid config, so their AWS
ids are examples that look real. Copied unchanged into a new stack, they would reach
the provider (a subnet lookup that fails with a provider error, or worse, an id that
happens to exist in someone's account). The program's preflight (`infra/preflight.py`)
and `python3 -m ops preflight` refuse every one of them with the key, the value and
the command that finds the user's own; the offline plan (`python -m offline.plan`) and
the program tests render the shipped files as they are (plans are for review, nothing
is looked up). `tests/model/test_placeholders.py` checks that this list is exactly the ids
the shipped files contain. Pure: no pulumi, no boto3.
"""

from __future__ import annotations

from typing import Any

from model.config import ClusterConfig
from model.paths import ROOT

# value -> the shipped stack file(s) it appears in. Only values that name something in
# an AWS account: names, sizes, dates and tags are the user's choice, and the block
# dates are compared with EC2's own record by preflight anyway.
EXAMPLE_VALUES: dict[str, str] = {
    "subnet-0a1b2c3d4e5f60718": "Pulumi.dev.yaml",
    "cr-0123456789abcdef0": "Pulumi.dev.yaml",
    "ami-0a1b2c3d4e5f60718": "Pulumi.dev.yaml",
    "cr-0aaaaaaaaaaaaaaa1": "Pulumi.prod.yaml",
    "cr-0bbbbbbbbbbbbbbb2": "Pulumi.prod.yaml",
    "ami-0f1e2d3c4b5a69788": "Pulumi.prod.yaml",
    "s3://example-prod-training-data/datasets": "Pulumi.prod.yaml",
    "ami-0c0ffee0c0ffee0c0": "Pulumi.smoke.yaml",
}
# An S3 example counts with any prefix: the bucket is what must be the user's own.
_EXAMPLE_BUCKETS = {v.removeprefix("s3://").split("/")[0] for v in EXAMPLE_VALUES if v.startswith("s3://")}


def is_example(value: str) -> bool:
    if value in EXAMPLE_VALUES:
        return True
    if value.startswith("s3://"):
        return value.removeprefix("s3://").split("/")[0] in _EXAMPLE_BUCKETS
    return False


def _leaves(value: Any, path: str):
    """(config path, string value) of every string in the parsed config, in config order."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]")
    elif isinstance(value, str):
        yield path, value


def _fix(cfg: ClusterConfig, path: str, value: str, region: str) -> str:
    """What to put there instead, as a command that finds the user's own value."""
    where = f" --region {region}" if region else ""
    az = cfg.network.availability_zone
    if path.startswith(f"{ROOT}.fsx.pinned."):
        return (
            "fsx.pinned records a file system that already exists: delete the whole fsx.pinned block before the "
            "first `pulumi up`, then pin the real one (`python3 -m ops pin --stack <stack> --fsx`)"
        )
    if value.startswith("subnet-"):
        return (
            f"replace it with the id of your private subnet in {az} (`aws ec2 describe-subnets{where} "
            f"--filters Name=availability-zone,Values={az} --query 'Subnets[].[SubnetId,VpcId,CidrBlock]' "
            "--output text`), or delete subnet_id to let the stack create a VPC"
        )
    if value.startswith("cr-"):
        return (
            "replace this block entry with the snippet `python3 -m ops find-blocks` prints for a Capacity Block "
            f"you bought (`aws ec2 describe-capacity-reservations{where} "
            "--filters Name=reservation-type,Values=capacity-block` lists yours)"
        )
    if value.startswith("ami-"):
        return (
            "replace it with the line `python3 -m ops pin --stack <stack> --image` prints (the DLAMI of your "
            f"region; or `aws ssm get-parameter{where} --name {cfg.image.ssm_parameter} "
            "--query Parameter.Value --output text`)"
        )
    if value.startswith("s3://"):
        return "replace it with s3://<your-bucket>[/prefix] (`aws s3 ls` lists yours), or delete data_repository"
    return "replace it with your own value"


def example_value_problems(cfg: ClusterConfig, region: str = "") -> list[tuple[str, str]]:
    """`path: message` for every example value from a shipped stack file, in config order."""
    out = []
    for path, value in _leaves(cfg.model_dump(), ROOT):
        if is_example(value):
            out.append(
                (path, f"{value} is the example value from the shipped stack file; {_fix(cfg, path, value, region)}")
            )
    return out
