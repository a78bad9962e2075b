"""`python -m offline.plan` on bad input: one line per problem, exit 2, never a traceback.

Every case here printed a Python traceback before (issue 11): YAML that is not a
mapping, YAML syntax errors, `--set` paths into a scalar or a string, values that do
not parse, an `--out` that cannot be written. Internal errors (bugs) are one line and
exit 1; secure values never leave the stack file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pulumi
import pytest

from offline.plan import DEBUG_ENV, main
from stackfile.tree import SECRET_PLACEHOLDER
from tests.support.mocks import REGION, valid_raw

REPO = Path(__file__).resolve().parents[2]
R = "gpu-cluster:cluster"
USAGE = "a stack file is a mapping with `config:` holding `gpu-cluster:cluster:` (see Pulumi.dev.yaml)"
CIPHER = "v1:Wm9vMUNpcGhlcnRleHQ6bm90LWEtcmVhbC1zZWNyZXQ="


def _cli(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out.splitlines(), err.splitlines()


def _stack_file(tmp_path: Path, text: str | bytes) -> Path:
    f = tmp_path / "Pulumi.t.yaml"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    return f


# --- the stack file ------------------------------------------------------------------

HEAD = "config:\n  aws:region: us-east-2\n"


@pytest.mark.parametrize(
    "text,line",
    [
        (
            HEAD + "  gpu-cluster:cluster:\n    name: [dev\n",
            "Pulumi.t.yaml:5:1: YAML error: expected ',' or ']', but got '<stream end>' "
            "(while parsing a flow sequence)",
        ),
        (
            HEAD + "  gpu-cluster:cluster:\n    name: dev\n   instance_type: p5.48xlarge\n",
            "Pulumi.t.yaml:5:4: YAML error: expected <block end>, but found '<block mapping start>' "
            "(while parsing a block mapping)",
        ),
        (
            HEAD + "  gpu-cluster:cluster:\n\tname: dev\n",
            "Pulumi.t.yaml:4:1: YAML error: found character '\\t' that cannot start any token "
            "(while scanning for the next token)",
        ),
        (
            HEAD + "  gpu-cluster:cluster:\n    name: a\n    name: b\n",
            "Pulumi.t.yaml:5:5: YAML error: duplicate key 'name' (first at line 4) (while reading a mapping)",
        ),
        ("- config\n- x\n", f"Pulumi.t.yaml:1:1: the file is a list, not a mapping; {USAGE}"),
        ("just words\n", f"Pulumi.t.yaml:1:1: the file is a string, not a mapping; {USAGE}"),
        ("", f"Pulumi.t.yaml: empty; {USAGE}"),
        ("config:\n  - a\n", f"Pulumi.t.yaml:2:3: `config:` is a list, not a mapping; {USAGE}"),
        ("config: 3\n", f"Pulumi.t.yaml:1:9: `config:` is a number, not a mapping; {USAGE}"),
        ("encryptionsalt: x\n", f"Pulumi.t.yaml:1:1: no `config:` mapping; {USAGE}"),
        (
            HEAD + "  gpu-cluster:cluster:\n    - name: dev\n",
            f"Pulumi.t.yaml:4:5: {R} is a list, not a mapping of settings (name, instance_type, network, "
            "capacity, ...); see Pulumi.dev.yaml",
        ),
        (
            HEAD + "  gpu-cluster:cluster: dev\n",
            f"Pulumi.t.yaml:3:24: {R} is a string, not a mapping of settings (name, instance_type, network, "
            "capacity, ...); see Pulumi.dev.yaml",
        ),
        (
            "config:\n  aws:region: [us-east-2]\n  gpu-cluster:cluster: {}\n",
            "Pulumi.t.yaml:2:15: aws:region is a list; write a region name such as us-east-2",
        ),
        (
            HEAD + "  gpu-cluster:cluster:\n    tags: !!binary aGVsbG8=\n",
            f"{R}.tags: binary data (!!binary) is not a config value; write a string, number, list or mapping",
        ),
        (
            HEAD + "  gpu-cluster:cluster:\n    tags: !!python/object:os.system {}\n",
            "Pulumi.t.yaml:4:11: YAML error: could not determine a constructor for the tag "
            "'tag:yaml.org,2002:python/object:os.system'",
        ),
        (b"config:\n  aws:region: us-east-2\xff\n", "Pulumi.t.yaml: not UTF-8 text (byte 0xff at offset 31)"),
        (
            HEAD + f"  gpu-cluster:cluster:\n    secure: {CIPHER}\n",
            f"Pulumi.t.yaml:4:5: {R} is one secure value; the offline plan cannot decrypt it. Keep the object "
            "in plain text and make only secret leaves secure (pulumi config set --path --secret "
            "'cluster.<key>' ...)",
        ),
    ],
    ids=[
        "unclosed-flow",
        "bad-indent",
        "tab",
        "duplicate-key",
        "list",
        "scalar",
        "empty",
        "config-list",
        "config-scalar",
        "no-config",
        "cluster-list",
        "cluster-scalar",
        "region-list",
        "binary",
        "python-tag",
        "not-utf8",
        "cluster-secure",
    ],
)
def test_bad_stack_file_is_one_line_exit_2(tmp_path, capsys, text, line):
    f = _stack_file(tmp_path, text)
    code, out, err = _cli(capsys, "--stack", "t1", "--config-file", str(f), "--out", str(tmp_path / "out"))
    assert (code, out) == (2, [])
    assert [e.replace(str(f), "Pulumi.t.yaml") for e in err] == [line]
    assert not (tmp_path / "out").exists()


def test_missing_stack_and_bad_stack_names(tmp_path, capsys):
    assert _cli(capsys, "--stack", "nope", "--out", str(tmp_path)) == (
        3,  # cannot read
        [],
        ["Pulumi.nope.yaml: no such stack file; stacks here: dev, prod, smoke (pulumi stack init NAME, then copy one)"],
    )
    assert _cli(capsys, "--stack", "../etc/x", "--out", str(tmp_path)) == (
        2,
        [],
        ["--stack '../etc/x': a stack name is 1-100 letters, digits, '-', '_' and '.'"],
    )


def test_the_stack_name_is_checked_with_a_config_file_too(tmp_path, capsys):
    """The program's AWS names derive from the stack name whichever file holds the config."""
    code, _, err = _cli(
        capsys, "--stack", "a b/../c", "--config-file", str(REPO / "Pulumi.dev.yaml"), "--out", str(tmp_path / "o")
    )
    assert (code, err) == (2, ["--stack 'a b/../c': a stack name is 1-100 letters, digits, '-', '_' and '.'"])
    code, _, err = _cli(
        capsys, "--stack", "x" * 101, "--config-file", str(REPO / "Pulumi.dev.yaml"), "--out", str(tmp_path / "o")
    )
    assert code == 2 and err[0].endswith("a stack name is 1-100 letters, digits, '-', '_' and '.'")


def test_a_yaml_alias_that_contains_itself(tmp_path, capsys):
    f = _stack_file(tmp_path, HEAD + "  gpu-cluster:cluster:\n    tags: &t\n      - *t\n")
    code, _, err = _cli(capsys, "--stack", "t1", "--config-file", str(f), "--out", str(tmp_path / "o"))
    assert (code, err) == (2, [f"{R}.tags[0]: a YAML alias that contains itself; write the value out"])


def test_a_yaml_error_in_a_fresh_process_has_no_traceback(tmp_path):
    """As users run it: `python -m offline.plan` in its own process."""
    f = _stack_file(tmp_path, HEAD + "  gpu-cluster:cluster:\n    name: 'dev\n")
    proc = subprocess.run(
        [sys.executable, "-m", "offline.plan", "--stack", "t1", "--config-file", str(f), "--out", str(tmp_path / "o")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line == f"{f}:5:1: YAML error: found unexpected end of stream (while scanning a quoted scalar)"


def test_unquoted_yaml_dates_are_config_text(tmp_path, capsys):
    """YAML reads `2026-12-01` as a date (JSON has none): it reaches the config as text."""
    raw = valid_raw()
    raw["capacity"]["capacity_blocks"][0]["end"] = "__END__"
    text = json.dumps({"config": {"aws:region": REGION, R: raw}}).replace('"__END__"', "2026-12-08")
    f = _stack_file(tmp_path, text)
    code, _, err = _cli(capsys, "--stack", "t1", "--config-file", str(f), "--out", str(tmp_path / "o"))
    assert code == 2
    assert err[0].startswith(f"{R}.capacity.capacity_blocks[0].end: "), err


# --- --set ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "assignment,line",
    [
        ("name", "--set name: expected PATH=VALUE, e.g. capacity.nodes=4 or 'tags[\"team.name\"]=ml'"),
        ("=4", "--set =4: expected PATH=VALUE, e.g. capacity.nodes=4 or 'tags[\"team.name\"]=ml'"),
        ("name.x=1", "--set name.x: cluster.name is a string, so it has no key 'x'; set cluster.name itself"),
        ("name[0]=1", "--set name[0]: cluster.name is a string, so it has no item 0; set cluster.name itself"),
        (
            "capacity.nodes.count=1",
            "--set capacity.nodes.count: cluster.capacity.nodes is a number, so it has no key 'count'; "
            "set cluster.capacity.nodes itself",
        ),
        (
            "capacity.capacity_blocks[2].instance_count=4",
            "--set capacity.capacity_blocks[2].instance_count: index 2 is out of range: "
            "cluster.capacity.capacity_blocks has 1 item (use [0] to change one, [1] to append)",
        ),
        (
            "capacity.capacity_blocks.first=4",
            "--set capacity.capacity_blocks.first: cluster.capacity.capacity_blocks is a list; "
            "index it with [N], not .first",
        ),
        (
            "capacity[0]=4",
            '--set capacity[0]: cluster.capacity is a mapping, not a list; use .key or ["key"], not [0]',
        ),
        (
            "capacity.capacity_blocks[-1].name=b",
            "--set capacity.capacity_blocks[-1].name: not a config path: [-1] is not a list index "
            '(a whole number from 0, or ["key"] for a key)',
        ),
        ('tags["a.b=1', '--set tags["a.b: not a config path: missing closing quote in a quoted key'),
        ("tags[0=1", "--set tags[0: not a config path: missing ']' after a list index"),
        (
            "tags[]=1",
            '--set tags[]: not a config path: [] is not a list index (a whole number from 0, or ["key"] for a key)',
        ),
        (
            "tags={team: [ml",
            "--set tags: the value does not parse as YAML flow at character 11: "
            "expected ',' or ']', but got '<stream end>'",
        ),
        (
            "tags={a: 1, a: 2}",
            "--set tags: the value does not parse as YAML flow at character 8: duplicate key 'a' (first at line 1)",
        ),
        (
            "aws:profile=x",
            "--set aws:profile: only gpu-cluster:cluster (and aws:region) can be set here, not the aws: namespace",
        ),
        ("gpu-cluster:other.x=1", "--set gpu-cluster:other.x: a gpu-cluster: path starts with gpu-cluster:cluster"),
        (
            "cluster={}",
            "--set cluster: set single keys (e.g. capacity.nodes=4); the whole object lives in the stack file",
        ),
        ("aws:region=", "--set aws:region: empty; give a region name such as us-east-2"),
    ],
)
def test_bad_set_is_one_line_exit_2(tmp_path, capsys, assignment, line):
    assert _cli(capsys, "--stack", "dev", "--out", str(tmp_path / "o"), "--set", assignment) == (2, [], [line])
    assert not (tmp_path / "o").exists()


def test_every_input_problem_at_once(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    code, _, err = _cli(
        capsys, "--stack", "dev", "--out", str(tmp_path / "f"), "--set", "name.x=1", "--set", "capacity.nodes"
    )
    assert code == 2
    assert [e.split(":")[0] for e in err] == ["--set name.x", "--set capacity.nodes", f"--out {tmp_path}/f"]


# --- --out ---------------------------------------------------------------------------


def test_out_is_a_file(tmp_path, capsys):
    f = tmp_path / "plan"
    f.write_text("keep me")
    assert _cli(capsys, "--stack", "dev", "--out", str(f)) == (
        2,
        [],
        [f"--out {f}: an existing file, not a directory; give a directory (created if missing)"],
    )
    assert f.read_text() == "keep me"


def test_out_below_a_file(tmp_path, capsys):
    f = tmp_path / "plan"
    f.write_text("")
    assert _cli(capsys, "--stack", "dev", "--out", str(f / "a" / "b")) == (
        2,
        [],
        [f"--out {f}/a/b: {f} is a file, so the directory cannot be created there"],
    )


def test_out_that_fails_while_writing(tmp_path, capsys, monkeypatch):
    """A write that fails after the checks (disk full, a race) is still one line, exit 2."""
    import offline.plan

    real = Path.write_text

    def full(self, *a, **kw):
        if self.name == "plan.json":
            raise OSError(28, "No space left on device", str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(offline.plan.Path, "write_text", full)
    out = tmp_path / "o"
    assert _cli(capsys, "--stack", "dev", "--out", str(out)) == (
        2,
        [],
        [f"--out {out}: cannot write {out}/plan.json: No space left on device"],
    )


# --- success, warnings, internal errors ----------------------------------------------


def test_success_says_what_it_wrote(tmp_path, capsys):
    code, out, err = _cli(capsys, "--stack", "dev", "--out", str(tmp_path))
    plan = json.loads((tmp_path / "plan.json").read_text())
    cloud = sum(r["custom"] for r in plan["resources"])
    files = sum(1 for p in (tmp_path / "userdata" / "node" / "files").rglob("*") if p.is_file())
    size = (tmp_path / "userdata" / "node" / "user-data").stat().st_size
    assert (code, err) == (0, [])
    assert out == [
        f"wrote {tmp_path}/plan.json: {len(plan['resources'])} resources ({cloud} AWS, "
        f"{len(plan['resources']) - cloud} components), {len(plan['outputs'])} stack outputs",
        f"wrote {tmp_path}/userdata/node/: user-data ({size} bytes, for dev-controller-lt, dev-lt), payload.tar.gz, "
        f"files/ ({files} node files)",
    ]


def test_config_warnings_are_printed_not_fatal(tmp_path, capsys, monkeypatch):
    """`config_warnings(cfg)` -> `warning: path: message` on stderr, exit 0
    (the program logs them with pulumi.log.warn, so `pulumi preview` shows them too)."""
    seen = []

    def warnings(cfg):
        seen.append(cfg.name)
        return [(f"{R}.capacity.nodes", "2 nodes but the blocks hold 4; 2 slots stay idle")]

    import infra.stack

    monkeypatch.setattr(infra.stack, "config_warnings", warnings)
    code, out, err = _cli(capsys, "--stack", "dev", "--out", str(tmp_path))
    assert (code, seen) == (0, ["dev"])
    assert err == [f"warning: {R}.capacity.nodes: 2 nodes but the blocks hold 4; 2 slots stay idle"]
    assert out[0].startswith(f"wrote {tmp_path}/plan.json: ")


def test_internal_error_is_one_line_exit_4(tmp_path, capsys, monkeypatch):
    import infra.cluster

    def broken(*a, **kw):
        raise KeyError("a bug\nover two lines")

    monkeypatch.setattr(infra.cluster, "build", broken)
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    assert _cli(capsys, "--stack", "dev", "--out", str(tmp_path / "o")) == (
        4,
        [],
        [
            "python -m offline.plan: internal error: KeyError: 'a bug\\nover two lines'; "
            f"rerun with {DEBUG_ENV}=1 for the traceback"
        ],
    )


def test_internal_error_traceback_on_request(tmp_path, capsys, monkeypatch):
    import infra.cluster

    def broken(*a, **kw):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(infra.cluster, "build", broken)
    monkeypatch.setenv(DEBUG_ENV, "1")
    assert main(["--stack", "dev", "--out", str(tmp_path / "o")]) == 4
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ZeroDivisionError: a bug" in err


def test_a_non_json_config_value_in_the_program_does_not_echo_it():
    """`pulumi config set gpu-cluster:cluster <text>`: Pulumi's own ConfigTypeError quotes
    the value (maybe a decrypted secret); the program names the key and the fix."""
    from infra.stack import run
    from offline.mocks import PlanMocks, run_with_mocks

    with pytest.raises(pulumi.RunError) as exc:
        run_with_mocks(
            lambda: run().outputs,
            PlanMocks(REGION),
            config={R: "hunter2 is not json", "aws:region": REGION},
        )
    assert str(exc.value) == (
        f"{R}: not a JSON object; set keys with `pulumi config set --path 'cluster.<key>' <value>` "
        "or write the object under config: in Pulumi.<stack>.yaml"
    )


# --- secure values ---------------------------------------------------------------------


def _tree_text(root: Path) -> str:
    return "".join(p.read_bytes().decode("latin-1") for p in sorted(root.rglob("*")) if p.is_file())


def test_secure_values_are_opaque(tmp_path, capsys):
    raw = valid_raw()
    raw["tags"]["token"] = {"secure": CIPHER}
    f = _stack_file(tmp_path, json.dumps({"config": {"aws:region": REGION, R: raw}}))
    out = tmp_path / "out"
    code, stdout, err = _cli(capsys, "--stack", "t1", "--config-file", str(f), "--out", str(out))
    assert (code, err) == (0, [])
    plan = json.loads((out / "plan.json").read_text())
    lt = next(r for r in plan["resources"] if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate")
    assert lt["inputs"]["tags"]["token"] == SECRET_PLACEHOLDER
    assert CIPHER not in _tree_text(out) and CIPHER not in "\n".join(stdout)


def test_a_refused_secure_value_is_named_never_printed(tmp_path, capsys):
    raw = valid_raw()
    raw["capacity"]["nodes"] = {"secure": CIPHER}
    f = _stack_file(tmp_path, json.dumps({"config": {"aws:region": REGION, R: raw}}))
    code, stdout, err = _cli(capsys, "--stack", "t1", "--config-file", str(f), "--out", str(tmp_path / "o"))
    assert (code, stdout) == (2, [])
    (line,) = err
    assert line.startswith(f"{R}.capacity.nodes: ")
    assert line.endswith(
        f"(a secure value: the offline plan cannot decrypt it and checked {SECRET_PLACEHOLDER!r} in its place)"
    )
    assert CIPHER not in line


def test_a_secure_value_given_with_set_stays_out_of_the_plan(tmp_path, capsys):
    code, _, err = _cli(capsys, "--stack", "dev", "--out", str(tmp_path), "--set", f"tags.token={{secure: {CIPHER}}}")
    assert (code, err) == (0, [])
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["overrides"] == ["tags.token=<secure>"]
    assert plan["outputs"] is not None and CIPHER not in _tree_text(tmp_path)
