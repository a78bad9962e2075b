"""Shell scripts that run on the developer's or CI machine (install-deps, .ci/run, ...):
`bash -n` and shellcheck. Node scripts (nodeside/, shipped verbatim) are checked in their
tree, where their `source` directives resolve, and as rendered copies in
test_userdata_render.py; this covers every other shell file in the repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Node scripts, templates and golden copies have their own checks; the rest are not ours.
SKIP_DIRS = {".git", "tests/golden", "nodeside", "userdata/templates", "venv", ".venv", "build", "node_modules"}
SHEBANGS = (b"#!/usr/bin/env bash", b"#!/bin/bash", b"#!/bin/sh", b"#!/usr/bin/env sh")


def repo_shell_scripts() -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        here = Path(dirpath).relative_to(ROOT)
        # Pruned in place so virtualenvs and build trees are never walked.
        dirnames[:] = [
            d for d in dirnames if (here / d).as_posix() not in SKIP_DIRS and (not d.startswith(".") or d == ".ci")
        ]
        for name in filenames:
            rel = here / name
            if rel.suffix in (".py", ".j2", ".md"):
                continue
            with (ROOT / rel).open("rb") as f:
                head = f.read(32)
            if rel.suffix == ".sh" or head.startswith(SHEBANGS):
                found.append(rel)
    return sorted(found)


SCRIPTS = repo_shell_scripts()


def test_known_scripts_are_found():
    assert Path("scripts/install-deps.sh") in SCRIPTS and Path(".ci/run") in SCRIPTS


@pytest.mark.parametrize("rel", SCRIPTS, ids=str)
def test_bash_n(rel):
    r = subprocess.run(["bash", "-n", str(ROOT / rel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck_repo_scripts():
    r = subprocess.run(["shellcheck", "-x", *map(str, SCRIPTS)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_a_shellcheck_pass_is_kept_by_content_and_a_failure_never(tmp_path):
    from tests.support.shellcheck import shellcheck

    tree, cache = tmp_path / "tree", tmp_path / "cache"
    (tree / "lib").mkdir(parents=True)
    cache.mkdir()
    (tree / "lib" / "common.sh").write_text("# shellcheck shell=bash\ngreeting=hello\n")
    (tree / "main.sh").write_text(
        '#!/usr/bin/env bash\n# shellcheck source=lib/common.sh\n. lib/common.sh\necho "$greeting"\n'
    )
    args = ["-x", "-s", "bash"]
    assert [r.returncode for r in shellcheck(args, ["main.sh"], cwd=tree, cache=cache)] == [0]
    assert shellcheck(args, ["main.sh"], cwd=tree, cache=cache) == []  # kept: not run again
    # with -x a sourced file is part of the input: main.sh's verdict depends on it
    (tree / "lib" / "common.sh").write_text("# shellcheck shell=bash\ngreet=hello\n")
    (bad,) = shellcheck(args, ["main.sh"], cwd=tree, cache=cache)
    assert bad.returncode == 1 and "SC2154" in bad.stdout
    (again,) = shellcheck(args, ["main.sh"], cwd=tree, cache=cache)  # a failure is never kept
    assert again.returncode == 1
