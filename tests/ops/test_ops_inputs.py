"""`gpu-cluster-ops`'s input layer: every argument refused in one line before the first
AWS call, the stack file's damage as one line per problem, and preflight's offline
checks reported when AWS cannot be reached."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from botocore.exceptions import NoCredentialsError

from ops.aws import Session
from ops.cli import main
from tests.support.ops_stubs import Aws, FakeClock, context
from tests.support.preflight_account import write_stack

FIND = ["find-blocks", "--instance-type", "p5.48xlarge", "--region", "us-east-2"]


@pytest.mark.parametrize(
    "argv, why",
    [
        (
            [*FIND, "--count", "0", "--days", "7"],
            "argument --count: '0' is out of range: give a whole number from 1 to 64",
        ),
        ([*FIND, "--count", "-3", "--days", "7"], "argument --count: '-3' is out of range"),
        ([*FIND, "--count", "65", "--days", "7"], "argument --count: '65' is out of range"),
        ([*FIND, "--count", "2", "--days", "nan"], "argument --days: 'nan' is not a whole number from 1 to 182"),
        ([*FIND, "--count", "2", "--days", "7", "--show", "x"], "argument --show: 'x' is not shaped like an AWS id"),
        (
            ["find-blocks", "--instance-type", "p5.48xlarge", "--region", "mars-1", "--count", "2", "--days", "7"],
            "argument --region: 'mars-1' is not an AWS region code",
        ),
        (["status", "--stack", "../x"], "argument --stack: '../x': a stack name is 1-100 letters"),
        (["replace", "i-zz", "--stack", "dev"], "argument node: 'i-zz' is neither a Slurm node name"),
        (["replace", "ip-10-0-1-5", "--stack", "dev", "--poll", "inf"], "argument --poll: 'inf' is out of range"),
        (["replace", "ip-10-0-1-5", "--stack", "dev", "--wait", "-1"], "argument --wait: '-1' is out of range"),
        (
            ["replace", "ip-10-0-1-5", "--stack", "dev", "--idle-timeout", "0"],
            "argument --idle-timeout: '0' is out of range",
        ),
        (["pin", "--stack", "dev", "--file-system-id", "fs-x"], "argument --file-system-id: 'fs-x' is not shaped like"),
        (
            ["status", "--stack", "dev", "--stack-dir", "/dev/null"],
            "argument --stack-dir: /dev/null: a character device",
        ),
    ],
)
def test_bad_arguments_are_refused_before_any_aws_call(argv, why, capsys):
    aws = Aws()  # no stubbed answer: an AWS call would fail the test
    with pytest.raises(SystemExit) as e:
        main(argv, ctx=context(aws), session_for=aws.session)
    assert e.value.code == 2
    assert why in capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize(
    "earliest, why",
    [
        ("", "--earliest : is not an ISO-8601 time"),
        ("2025-01-01", "--earliest 2025-01-01: in the past (today is 2026-12-01); give a later date"),
        ("9999-12-31", "--earliest 9999-12-31: year 9999 is outside 2000-2200"),
        ("2029-01-01", "--earliest 2029-01-01: more than 548 days ahead; give a nearer date"),
    ],
)
def test_dates_are_parsed_in_a_bounded_range(earliest, why):
    aws = Aws()
    ctx = context(aws, clock=FakeClock())
    rc = main([*FIND, "--count", "2", "--days", "7", "--earliest", earliest], ctx=ctx, session_for=aws.session)
    assert rc == 2
    assert ctx.err.getvalue().strip() == f"gpu-cluster-ops find-blocks: {why}" + (
        "; give a date like 2026-12-08 or a time like 2026-12-08T11:30:00Z" if "ISO" in why or "year" in why else ""
    )


ALIAS_BOMB = "x:\n  a0: &a0 [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
    f"  a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 8)
)


@pytest.mark.parametrize(
    "content, start",
    [
        (b"config:\n  gpu-cluster:cluster: {name: 'dev\n", "Pulumi.dev.yaml:"),
        (b"config:\n  aws:region: us-east-2\n  gpu-cluster:cluster: \xff\xfe\n", "Pulumi.dev.yaml: not UTF-8 text"),
        (b"- a\n- b\n", "Pulumi.dev.yaml:1:1: the file is a list, not a mapping"),
        (b"config:\n  gpu-cluster:cluster: [1, 2]\n", "Pulumi.dev.yaml:2:24: gpu-cluster:cluster is a list"),
        (
            (ALIAS_BOMB + "config:\n  aws:region: us-east-2\n  gpu-cluster:cluster:\n    tags: *a7\n").encode(),
            "gpu-cluster:cluster: more than 100000 values",
        ),
    ],
)
def test_a_damaged_stack_file_is_one_line_per_problem_for_ops(tmp_path, content, start, capsys):
    (tmp_path / "Pulumi.dev.yaml").write_bytes(content)
    aws = Aws()
    ctx = context(aws)
    for command in (["preflight"], ["status"], ["pin", "--image"], ["health", "ip-10-0-1-5"]):
        rc = main([*command, "--stack", "dev", "--stack-dir", str(tmp_path)], ctx=ctx, session_for=aws.session)
        assert rc == 2, command
    lines = ctx.err.getvalue().splitlines() + ctx.out.getvalue().splitlines()
    assert lines and all("Traceback" not in line for line in lines)
    assert any(line.startswith(start) for line in lines), lines[:3]


def test_preflight_reports_its_offline_checks_when_aws_cannot_be_reached(tmp_path):
    """A block that ended last year is found offline; the missing credentials come after it."""
    root = write_stack(tmp_path)
    later = datetime(2027, 12, 1, 12, 0, tzinfo=UTC)

    def no_credentials(service, region):
        raise NoCredentialsError()

    ctx = context(Aws(), clock=FakeClock(later))
    rc = main(
        ["preflight", "--stack", "dev", "--stack-dir", str(root)],
        ctx=ctx,
        session_for=lambda region: Session(region, factory=no_credentials),
    )
    lines = ctx.out.getvalue().splitlines()
    assert rc == 1
    assert lines[0].startswith("gpu-cluster:cluster.capacity.capacity_blocks[0].end: block cr-0c4f9a1e2b3d5a6f7 ends")
    assert lines[-2] == (
        "AWS checks not run: reading AWS: no AWS credentials; configure a profile or environment credentials"
    )
    assert lines[-1].startswith("preflight dev (us-east-2): ") and lines[-1].endswith("(offline checks only)")
