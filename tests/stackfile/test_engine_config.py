"""Config as the engine assembles it: Pulumi.yaml's values and defaults under the stack
file, `pulumi config --json` where a CLI is on PATH (a fake one here, recording how it
was called), and the fallback to the files when it cannot answer."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import yaml

from model.paths import ROOT as KEY
from stackfile.engine import SOURCE_ENV, from_files, read_config
from stackfile.errors import InputError
from stackfile.project import read_project
from stackfile.tree import SECRET_PLACEHOLDER

REPO = Path(__file__).resolve().parents[2]
CLUSTER = {"instance_type": "p5.48xlarge", "network": {"availability_zone": "us-west-2a"}, "capacity": {"nodes": 2}}


def _project(root: Path, config: dict | None = None, **extra) -> None:
    doc = {"name": "gpu-cluster", "runtime": "python", **extra}
    if config is not None:
        doc["config"] = config
    (root / "Pulumi.yaml").write_text(yaml.safe_dump(doc))


def _stack(root: Path, name: str, config: dict) -> None:
    (root / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}))


def test_project_values_and_defaults_count_where_the_stack_file_is_silent(tmp_path):
    _project(tmp_path, {"aws:region": {"value": "us-west-2"}, "cluster": {"default": CLUSTER}})
    _stack(tmp_path, "a", {})
    _stack(tmp_path, "b", {"aws:region": "eu-west-1", KEY: {**CLUSTER, "capacity": {"nodes": 8}}})
    a, b = from_files("a", tmp_path), from_files("b", tmp_path)
    assert (a.raw, a.region) == (CLUSTER, "us-west-2")
    # The stack file wins key by key (the engine does not merge inside an object).
    assert (b.raw["capacity"], b.region) == ({"nodes": 8}, "eu-west-1")


def test_plain_project_value_and_stack_config_dir(tmp_path):
    _project(tmp_path, {"aws:region": "ap-south-1"}, stackConfigDir="stacks")
    (tmp_path / "stacks").mkdir()
    _stack(tmp_path / "stacks", "a", {KEY: CLUSTER})
    cfg = from_files("a", tmp_path)
    assert (cfg.path, cfg.region, cfg.raw) == (tmp_path / "stacks" / "Pulumi.a.yaml", "ap-south-1", CLUSTER)


@pytest.mark.parametrize(
    "key,decl,why",
    [
        (
            "aws:region",
            {"type": "string", "value": "x"},
            "is not in the project's namespace: it may not declare a type or a default, only a `value`",
        ),
        ("aws:region", {"description": "d"}, "is not in the project's namespace and must give a `value`"),
        ("cluster", {"default": {}, "value": {}}, "has both `default` and `value`; keep one"),
        ("nodes", {"type": "array"}, "declares an array without `items` (its element type)"),
        ("nodes", {"type": "object"}, "type 'object': Pulumi's project types are string, integer, boolean, array"),
        ("nodes", {"type": "integer", "default": "2"}, "default '2' is not of type integer"),
        (
            "nodes",
            {"required": True},
            "unknown attribute(s) required; a declaration has default, description, items, secret, type, value",
        ),
    ],
)
def test_declarations_the_engine_refuses(tmp_path, key, decl, why):
    _project(tmp_path, {key: decl})
    with pytest.raises(InputError) as err:
        read_project(tmp_path)
    assert err.value.lines == [f"Pulumi.yaml: config.{key}: {why}"]


def test_the_shipped_project_file_declares_the_cluster_object_and_links_its_reference():
    project = read_project(REPO)
    assert project is not None and project.name == "gpu-cluster" and project.values == {}
    config = yaml.safe_load((REPO / "Pulumi.yaml").read_text())["config"]
    # One object: its leaves' types and defaults live in the pydantic schema and the
    # generated reference, not in Pulumi's four scalar types.
    assert list(config) == ["cluster"] and set(config["cluster"]) == {"description"}
    assert "docs/config-reference.md" in config["cluster"]["description"]
    assert (REPO / "docs" / "config-reference.md").is_file()


# --- a fake `pulumi` on PATH ---------------------------------------------------------


def _fake_pulumi(tmp_path: Path, answer: dict | None, fail: str | None = None) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "pulumi"
    out = json.dumps(answer)
    body = f"echo '{fail}' >&2; exit 255" if fail else f"cat <<'JSON'\n{out}\nJSON"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$PWD" "$@" > "{tmp_path}/pulumi-args"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir


@pytest.fixture
def project_dir(tmp_path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root)
    shutil.copy(REPO / "Pulumi.dev.yaml", root)
    return root


def test_pulumi_config_json_is_what_counts_where_a_cli_is_present(tmp_path, project_dir, monkeypatch):
    esc = {**CLUSTER, "capacity": {"nodes": 4}}
    answer = {
        KEY: {"value": json.dumps(esc), "objectValue": esc, "secret": False},
        "aws:region": {"value": "us-west-2", "secret": False},
    }
    monkeypatch.setenv("PATH", f"{_fake_pulumi(tmp_path, answer)}{os.pathsep}{os.environ['PATH']}")
    cfg = read_config("dev", project_dir, source="auto")
    assert (cfg.source, cfg.raw, cfg.region, cfg.notes) == ("pulumi", esc, "us-west-2", [])
    args = (tmp_path / "pulumi-args").read_text().splitlines()
    assert args == [str(project_dir), "config", "--json", "--open", "--stack", "dev"]


def test_a_secret_cluster_object_comes_from_the_stack_file_with_a_note(tmp_path, project_dir, monkeypatch):
    answer = {KEY: {"secret": True}, "aws:region": {"value": "us-west-2", "secret": False}}
    monkeypatch.setenv("PATH", f"{_fake_pulumi(tmp_path, answer)}{os.pathsep}{os.environ['PATH']}")
    cfg = read_config("dev", project_dir, source="auto")
    assert cfg.raw["instance_type"] == "p5.48xlarge" and cfg.region == "us-west-2"
    assert cfg.notes == [
        f"{KEY} holds a secure value, which `pulumi config` shows only with --show-secrets; "
        f"read it from Pulumi.dev.yaml (secure leaves as {SECRET_PLACEHOLDER!r})"
    ]


def test_a_failing_cli_falls_back_to_the_files_or_is_an_error_when_asked_for(tmp_path, project_dir, monkeypatch):
    bin_dir = _fake_pulumi(tmp_path, None, fail="error: no stack named dev found")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cfg = read_config("dev", project_dir, source="auto")
    assert (cfg.source, cfg.region) == ("files", "us-east-2")
    assert cfg.notes == [
        "`pulumi config --stack dev` failed: error: no stack named dev found; "
        "read Pulumi.dev.yaml and Pulumi.yaml instead (no ESC environments)"
    ]
    with pytest.raises(InputError) as err:
        read_config("dev", project_dir, source="pulumi")
    assert err.value.lines == ["`pulumi config --stack dev` failed: error: no stack named dev found"]


def test_files_source_never_runs_the_cli(tmp_path, project_dir, monkeypatch):
    monkeypatch.setenv("PATH", f"{_fake_pulumi(tmp_path, {})}{os.pathsep}{os.environ['PATH']}")
    assert read_config("dev", project_dir, source="files").region == "us-east-2"
    assert not (tmp_path / "pulumi-args").exists()


def test_ops_and_the_plan_writer_read_through_the_cli(tmp_path, project_dir, monkeypatch):
    from offline.plan import main as plan_main
    from ops.stack import load_raw

    raw = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())["config"][KEY]
    raw["tags"]["source"] = "esc"  # as an ESC environment would add it
    answer = {KEY: {"objectValue": raw, "secret": False}, "aws:region": {"value": "us-east-2", "secret": False}}
    monkeypatch.setenv("PATH", f"{_fake_pulumi(tmp_path, answer)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(SOURCE_ENV, raising=False)
    assert load_raw("dev", project_dir)[0]["tags"]["source"] == "esc"
    monkeypatch.chdir(project_dir)
    assert plan_main(["--stack", "dev", "--out", str(tmp_path / "plan")]) == 0
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    [vpc_sg] = [r for r in plan["resources"] if r["type"] == "aws:ec2/securityGroup:SecurityGroup"]
    assert vpc_sg["inputs"]["tags"]["source"] == "esc"


def test_an_unknown_source_is_refused(monkeypatch):
    from stackfile.engine import source_from_env

    monkeypatch.setenv(SOURCE_ENV, "esc")
    with pytest.raises(InputError) as err:
        source_from_env()
    assert err.value.lines == [f"{SOURCE_ENV}=esc: one of auto, pulumi, files"]
