"""Config rules for values AWS, IAM or the nodes refuse only later (issue 21 item 2):
`.`/`..` path components, ECR hosts in regions that do not exist, malformed ARNs, an ARN
partition that is not the region's, unknown IAM Condition operators, calendar-edge block
dates, secrets never echoed, and refusals that name real keys only."""

from __future__ import annotations

import pytest

from model.config import parse_config
from model.errors import ConfigError
from tests.support.mocks import valid_raw

R = "gpu-cluster:cluster"


def _problems(mutate, region="us-east-2") -> list[tuple[str, str]]:
    raw = valid_raw()
    mutate(raw)
    with pytest.raises(ConfigError) as err:
        parse_config(raw, region=region)
    return err.value.problems


def _statement(resource, condition=None):
    st = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": resource}
    return {"statements": [{**st, **({"Condition": condition} if condition else {})}]}


def _fsx_repo(path):
    def mutate(raw):
        raw["fsx"] = {
            "data_repository": {"s3_uri": "s3://my-training-data/x", "file_system_path": path},
            "backup_retention_days": 0,
            "allow_no_backups": True,
        }

    return mutate


@pytest.mark.parametrize("path", ["/data/../.gpu-cluster", "/data/./x", "/.."])
def test_paths_with_dot_components_are_refused(path):
    assert _problems(_fsx_repo(path)) == [
        (
            f"{R}.fsx.data_repository.file_system_path",
            f"'{path}' has a '{'..' if '..' in path else '.'}' component, so it is not the path it seems once "
            f"resolved; write it without '{'..' if '..' in path else '.'}'",
        )
    ]
    (problem,) = _problems(lambda r: r.setdefault("validation", {}).update(container_image="/fsx/../etc/x.sqsh"))
    assert problem[0] == f"{R}.validation.container_image" and "has a '..' component" in problem[1]


@pytest.mark.parametrize(
    "host, why",
    [
        (
            "123456789012.dkr.ecr.xx-fake-9.amazonaws.com",
            "names region 'xx-fake-9', which is not an AWS region code; use the registry's region, e.g. "
            "123456789012.dkr.ecr.us-east-2.amazonaws.com",
        ),
        (
            "123456789012.dkr.ecr.us-east-1.amazonaws.com.cn",
            ": ECR hosts in us-east-1 end in amazonaws.com; write 123456789012.dkr.ecr.us-east-1.amazonaws.com",
        ),
    ],
)
def test_ecr_hosts_in_regions_that_do_not_exist_or_with_the_wrong_suffix(host, why):
    assert _problems(lambda r: r.update(containers={"ecr": [host]})) == [
        (f"{R}.containers.ecr[0]", f"'{host}'{' ' if not why.startswith(':') else ''}{why}")
    ]


@pytest.mark.parametrize(
    "arn, why",
    [
        ("arn:aws", "is not an ARN"),
        ("arn:aws:s3", "is not an ARN"),
        ("arn:amazon:s3:::b/*", "names partition 'amazon'"),
        ("arn:aws::us-east-2:123456789012:x", "has no service name"),
        ("arn:aws:ec2:mars-1:123456789012:instance/*", "names region 'mars-1'"),
        ("arn:aws:ec2:us-east-2:12345:instance/*", "names account '12345'"),
    ],
)
def test_malformed_resource_arns_are_refused(arn, why):
    ((path, message),) = _problems(lambda r: r.update(node_iam=_statement(arn)))
    assert path == f"{R}.node_iam.statements[0].Resource"
    assert message.startswith(f"'{arn}' {why}")


@pytest.mark.parametrize(
    "arn", ["*", "arn:aws:s3:::my-bucket/*", "arn:aws:ec2:*:*:instance/*", "arn:aws:iam::123456789012:role/x"]
)
def test_wellformed_arns_pass(arn):
    raw = valid_raw()
    raw["node_iam"] = _statement(arn)
    parse_config(raw, region="us-east-2")


def test_an_arn_partition_that_is_not_the_regions():
    def mutate(raw):
        raw["node_iam"] = {
            **_statement(["arn:aws:s3:::ok/*", "arn:aws-cn:s3:::bucket/*"]),
            "managed_policy_arns": ["arn:aws-cn:iam::aws:policy/ReadOnlyAccess"],
        }

    assert _problems(mutate) == [
        (
            f"{R}.node_iam.statements[0].Resource[1]",
            "'arn:aws-cn:s3:::bucket/*' is in partition aws-cn, but aws:region us-east-2 is in aws; write arn:aws:...",
        ),
        (
            f"{R}.node_iam.managed_policy_arns[0]",
            "'arn:aws-cn:iam::aws:policy/ReadOnlyAccess' is in partition aws-cn, but aws:region us-east-2 is in aws; "
            "write arn:aws:...",
        ),
    ]


@pytest.mark.parametrize("op", ["StringEqualz", "ForEachValue:StringEquals", "NullIfExists", "stringequals"])
def test_condition_operators_iam_does_not_have(op):
    ((path, message),) = _problems(lambda r: r.update(node_iam=_statement("*", {op: {"aws:RequestedRegion": "x"}})))
    assert path == f"{R}.node_iam.statements[0].Condition"
    assert message.startswith(f"'{op}' is not an IAM condition operator")


@pytest.mark.parametrize("op", ["StringEquals", "ForAnyValue:StringLike", "ArnLikeIfExists", "Null", "DateLessThan"])
def test_condition_operators_iam_has(op):
    raw = valid_raw()
    raw["node_iam"] = _statement("*", {op: {"aws:RequestedRegion": ["us-east-2"]}})
    parse_config(raw, region="us-east-2")


def test_a_bad_condition_value_is_one_problem_at_a_real_key():
    """Pydantic reports a union's member types as path parts (`.constrained-str`, `.bool`,
    `.int` ...): five invented keys for one mistake."""
    problems = _problems(lambda r: r.update(node_iam=_statement("*", {"StringEquals": {"aws:SourceVpc": {"a": 1}}})))
    assert problems == [
        (
            f"{R}.node_iam.statements[0].Condition",
            "StringEquals.aws:SourceVpc: a condition value is a string, number or true/false, or a list of them "
            '(got {"a": 1})',
        )
    ]


@pytest.mark.parametrize("when", ["9999-12-31T11:30:00Z", "9999-12-31T23:30:00-12:00", "0001-01-01T11:30:00Z"])
def test_block_dates_at_the_calendar_edge_are_refused_not_an_internal_error(when):
    def mutate(raw):
        raw["capacity"]["capacity_blocks"][0]["end"] = when

    ((path, message),) = _problems(mutate)
    assert path == f"{R}.capacity.capacity_blocks[0].end" and "is outside the years 2020-2200" in message


@pytest.mark.parametrize(
    "kind, secret",
    [
        ("ssm", "nvapi-SUPERSECRET TOKEN"),
        ("secretsmanager", "AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG"),
        ("stack", "nvapi-SECRET-Token"),
    ],
)
def test_a_value_pasted_where_a_reference_belongs_is_never_echoed(kind, secret):
    cred = {
        "registry": "nvcr.io",
        "kind": kind,
        "secret": secret,
        **({"login": "$oauthtoken"} if kind == "stack" else {}),
    }
    problems = _problems(lambda r: r.update(containers={"registry_credentials": [cred]}))
    assert [p for p, _ in problems] == [f"{R}.containers.registry_credentials[0].secret"]
    message = problems[0][1]
    assert secret not in message and secret.split()[0] not in message
    assert "the value is not shown: it may be the credential itself" in message
