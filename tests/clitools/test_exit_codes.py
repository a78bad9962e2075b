"""One exit-code table for every CLI: its home (clitools/exits.py), the node-side copies,
docs/cli.md, and what each CLI returns for each kind of outcome."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from clitools import exits

REPO = Path(__file__).resolve().parents[2]
# Node-side programs: single files on the nodes, each with its own copy of the table.
COPIES = ("nodeside/verdict.py", "nodeside/health.py", "nodeside/run.py", "nodeside/cluster_status.py")
NAMES = ("EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_UNREACHABLE", "EXIT_INTERNAL", "EXIT_INTERRUPTED")
HOME = (exits.OK, exits.FAILED, exits.USAGE, exits.UNREACHABLE, exits.INTERNAL, exits.INTERRUPTED)


def _copy(path: str) -> tuple[int, ...]:
    tree = ast.parse((REPO / path).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):
            names = tuple(t.id for t in node.targets[0].elts if isinstance(t, ast.Name))
            if names == NAMES:
                return tuple(ast.literal_eval(node.value))
    raise AssertionError(f"{path}: no `{', '.join(NAMES)} = ...` line")


@pytest.mark.parametrize("path", COPIES)
def test_every_node_side_copy_is_the_table(path):
    assert _copy(path) == HOME


def test_the_table_is_distinct_and_in_docs():
    codes = [code for code, _, _ in exits.TABLE]
    assert codes == sorted(set(codes)) and set(codes) == set(HOME)
    doc = (REPO / "docs" / "cli.md").read_text()
    for code, name, meaning in exits.TABLE:
        assert f"| {code} | {name} | {meaning} |" in doc, f"docs/cli.md lacks the row of exit code {code}"
    readme = (REPO / "README.md").read_text()
    assert "docs/cli.md" in readme


def test_verdict_debug_variable_is_the_tables():
    from nodeside import verdict

    assert verdict.DEBUG_ENV == exits.DEBUG_ENV


# --- each CLI, each kind of outcome (the ops, plan and verdict suites hold the rest) --------


def test_review_usage_before_any_render(tmp_path, capsys):
    from offline import review

    assert review.main(["--base", "HEAD", "--out", str(tmp_path)]) == exits.USAGE
    assert capsys.readouterr().err == f"--out {tmp_path}: a directory; give a file name to write\n"
    (tmp_path / "f").write_text("")
    assert review.main(["--base", "HEAD", "--out", str(tmp_path / "f" / "r.md")]) == exits.USAGE
    assert capsys.readouterr().err.endswith("is a file, so the file cannot be created below it\n")
    assert review.main(["--base", "no-such-ref", "--repo", str(tmp_path)]) == exits.USAGE
    assert "is not a git checkout" in capsys.readouterr().err
    assert review.main(["--base", "HEAD", "--repo", str(tmp_path / "nope")]) == exits.UNREACHABLE


def test_review_internal_error_is_one_line(monkeypatch, capsys):
    from offline import review

    monkeypatch.delenv(exits.DEBUG_ENV, raising=False)
    monkeypatch.setattr(review, "review", lambda *a, **k: {}["bug"])
    assert review.main(["--base", "HEAD"]) == exits.INTERNAL
    assert capsys.readouterr().err == (
        "python -m offline.review: internal error: KeyError: 'bug'; rerun with GPU_CLUSTER_DEBUG=1 for the traceback\n"
    )


def test_localcluster_bad_arguments_and_internal_error(monkeypatch, capsys):
    from localcluster import cli

    for argv in (["--name", "BAD", "status"], ["--subnet", "256", "status"], ["up", "-n", "1"], ["replace", "A B"]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == exits.USAGE
    capsys.readouterr()

    def broken(*a, **k):
        raise RuntimeError("bug")

    monkeypatch.setattr(cli, "_root_check", lambda: None)
    monkeypatch.setattr(cli, "LocalCluster", broken)
    assert cli.main(["--name", "t1", "status"]) == exits.INTERNAL
    assert capsys.readouterr().err.startswith("python -m localcluster status: internal error: RuntimeError: bug;")


def test_localcluster_refuses_a_second_up(monkeypatch, capsys):
    from localcluster import cli

    class Up:
        def __init__(self, *a, **k):
            self.c = type("C", (), {"nodes": {"n": 1}})()

    monkeypatch.setattr(cli, "_root_check", lambda: None)
    monkeypatch.setattr(cli, "LocalCluster", Up)
    assert cli.main(["--name", "t1", "up"]) == exits.USAGE
    assert "is already up" in capsys.readouterr().err


def test_images_prune_bounds(capsys):
    from localcluster import images

    with pytest.raises(SystemExit) as e:
        images.main(["prune", "--keep", "0"])
    assert e.value.code == exits.USAGE


def _report(tmp_path, *argv):
    return subprocess.run(
        [sys.executable, str(REPO / "nodeside" / "validation_report.py"), *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_validation_report_config_and_run_directory(tmp_path):
    cfg = tmp_path / "config.json"
    r = _report(tmp_path, "--config", str(cfg), "status")
    assert (r.returncode, r.stderr) == (
        exits.UNREACHABLE,
        f"validation_report.py status: --config {cfg}: cannot read file: No such file or directory\n",
    )
    r = _report(tmp_path, "--config", str(tmp_path), "status")
    assert r.returncode == exits.USAGE and "not a log file" not in r.stderr and "a directory" in r.stderr
    cfg.write_text("[1, 2]")
    assert _report(tmp_path, "--config", str(cfg), "status").returncode == exits.USAGE
    cfg.write_text(json.dumps({"fsx_root": str(tmp_path), "instance_type": "p5.48xlarge"}))
    r = _report(tmp_path, "--config", str(cfg), "build")
    assert r.returncode == exits.USAGE and "cluster_name, thresholds missing or of the wrong type" in r.stderr
    cfg.write_text(
        json.dumps({"fsx_root": str(tmp_path), "instance_type": "p5.48xlarge", "cluster_name": "c", "thresholds": {}})
    )
    r = _report(tmp_path, "--config", str(cfg), "--run", str(tmp_path / "run1"), "build")
    assert r.returncode == exits.UNREACHABLE and "no such run directory" in r.stderr
    r = _report(
        tmp_path, "--config", str(cfg), "--run", str(cfg), "skip", "--step", "pmix", "--nodes", "a", "--reason", "x"
    )
    assert r.returncode == exits.USAGE and "not a directory" in r.stderr
    r = _report(tmp_path, "--config", str(cfg), "status")
    assert r.returncode == exits.UNREACHABLE  # no run recorded yet
    r = _report(tmp_path, "--config", str(cfg), "plan", "--nodes", "a,b", "--features", "/dev/zero")
    assert r.returncode == exits.USAGE and "not a regular file" in r.stderr
    assert _report(tmp_path, "--version").stdout.startswith("validation_report.py (gpu-cluster) ")


def test_cluster_status_usage():
    r = subprocess.run(
        [sys.executable, str(REPO / "nodeside" / "cluster_status.py")], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == exits.USAGE and r.stderr == "usage: cluster_status.py FSX_ROOT (an absolute path)\n"
