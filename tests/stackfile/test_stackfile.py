"""The stack-file package: `ops` and the plan writer read a stack file with one reader,
so a file one refuses the other refuses with the same line (`pulumi preview` refuses a
duplicate key; PyYAML alone would keep the last one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offline import plan
from ops.cli import main as ops_main
from stackfile.errors import InputError
from stackfile.reader import read_stack_file
from tests.support.ops_stubs import Aws, context

REPO = Path(__file__).resolve().parents[2]
DEV = (REPO / "Pulumi.dev.yaml").read_text()

BAD = {
    "duplicate key": (
        "config:\n  aws:region: us-east-2\n  aws:region: us-west-2\n",
        "Pulumi.t.yaml:3:3: YAML error: duplicate key 'aws:region' (first at line 2) (while reading a mapping)",
    ),
    "duplicate nested key": (
        "config:\n  gpu-cluster:cluster:\n    name: a\n    tags: {}\n    name: b\n",
        "Pulumi.t.yaml:5:5: YAML error: duplicate key 'name' (first at line 3) (while reading a mapping)",
    ),
    "not a mapping": (
        "- config\n",
        "Pulumi.t.yaml:1:1: the file is a list, not a mapping; a stack file is a mapping with `config:` "
        "holding `gpu-cluster:cluster:` (see Pulumi.dev.yaml)",
    ),
}


def _ops(argv: list[str]) -> tuple[int, list[str]]:
    aws = Aws()
    ctx = context(aws)
    rc = ops_main(argv, ctx=ctx, session_for=aws.session)
    aws.done()  # refused before any AWS call
    return rc, ctx.err.getvalue().splitlines()


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("command", ["preflight", "status", "pin"])
def test_ops_refuses_what_the_plan_writer_refuses_with_the_same_line(tmp_path, case, command):
    text, line = BAD[case]
    (tmp_path / "Pulumi.t.yaml").write_text(text)
    rc, err = _ops([command, "--stack", "t", "--stack-dir", str(tmp_path)])
    with pytest.raises(InputError) as written:
        plan.write_plan("t", tmp_path / "out", root=tmp_path)
    assert (rc, err) == (2, [line])
    assert written.value.lines == [line]
    assert not (tmp_path / "out").exists()


def test_the_plan_cli_prints_the_line_ops_prints(tmp_path, capsys):
    """The command lines themselves: a file outside the project is named by its path."""
    text, line = BAD["duplicate key"]
    (tmp_path / "Pulumi.t.yaml").write_text(text)
    rc = plan.main(["--stack", "t", "--config-file", str(tmp_path / "Pulumi.t.yaml"), "--out", str(tmp_path / "o")])
    assert (rc, capsys.readouterr().err.splitlines()) == (2, [f"{tmp_path}/{line}"])
    assert _ops(["status", "--stack", "t", "--stack-dir", str(tmp_path)]) == (2, [line])


def test_ops_reads_the_stack_files_of_the_working_directory(tmp_path, monkeypatch):
    """As `pulumi` does: no --stack-dir, the stack file is the one where ops runs."""
    text, line = BAD["duplicate key"]
    (tmp_path / "Pulumi.t.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert _ops(["preflight", "--stack", "t"]) == (2, [line])
    rc, err = _ops(["status", "--stack", "nope"])
    assert (rc, err) == (
        3,  # cannot read (clitools/exits.py)
        ["Pulumi.nope.yaml: no such stack file; stacks here: t (pulumi stack init NAME, then copy one)"],
    )


def test_secure_leaves_stay_opaque(tmp_path):
    """A `secure:` leaf is never decrypted or copied: its path is reported, its value is
    the placeholder."""
    f = tmp_path / "Pulumi.t.yaml"
    f.write_text(DEV.replace("      team: ml-infra\n", "      team:\n        secure: v1:AAAA\n", 1))
    raw, region, secrets, problems = read_stack_file(f, tmp_path)
    assert (region, secrets, problems) == ("us-east-2", ["gpu-cluster:cluster.tags.team"], [])
    assert raw["tags"]["team"] == "secret-not-decrypted"
    assert "v1:AAAA" not in json.dumps(raw)
