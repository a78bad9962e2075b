"""scripts/install-deps.sh without installing anything: which virtualenv it fills, and
the one-line fix it prints for each interpreter a stock machine may have. The real
installs (Debian 12 on this host, Debian 13 in a trixie root) are
tests/daemons/test_install_debian.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-deps.sh"


def _pulumi_venv() -> str:
    return yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["runtime"]["options"]["virtualenv"]


def test_makefile_and_pulumi_yaml_name_one_virtualenv():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^VENV \?= (\S+)$", makefile, re.M).group(1) == _pulumi_venv()
    # Every recipe that runs Python for tests or the local cluster runs the virtualenv's.
    recipes = makefile + "".join(p.read_text() for p in (ROOT / "mk").glob("*.mk"))
    runs = re.findall(r"^\t.*?(\$\((?:PYTHON|VENV_PYTHON)\)) (?:-m (?!venv )\S+|bench/)", recipes, re.M)
    assert runs and set(runs) == {"$(VENV_PYTHON)"}, runs


def _stub(tmp_path: Path, version_ok: bool, venv: str = "exit 0") -> Path:
    """A fake interpreter: answers the version probe, then runs `venv` for `-m venv`."""
    stub = tmp_path / "fakepython"
    stub.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f"  *version_info*) exit {0 if version_ok else 1} ;;\n"
        "  *platform*) echo 3.9.2 ;;\n"
        f"  '-m venv'*) {venv} ;;\n"
        "esac\n"
    )
    stub.chmod(0o755)
    return stub


def _run(tmp_path: Path, stub: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(stub), "VENV": str(tmp_path / "venv")},
        capture_output=True,
        text=True,
    )


def test_old_interpreter_is_refused_with_the_version_it_needs(tmp_path):
    r = _run(tmp_path, _stub(tmp_path, version_ok=False), "--venv")
    assert r.returncode == 1
    assert r.stderr.strip().endswith("is Python 3.9.2; gpu-cluster needs 3.11 or newer (pyproject.toml)")
    assert not (tmp_path / "venv").exists()


def test_python_without_venv_support_names_the_debian_package(tmp_path):
    # Debian's python3 without python3-venv: `-m venv` fails (no ensurepip).
    r = _run(tmp_path, _stub(tmp_path, True, "echo 'ensurepip is not available' >&2; exit 1"), "--venv")
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("install-deps: ") and "apt-get install python3-venv" in last
    assert not (tmp_path / "venv").exists()


def test_missing_interpreter_names_the_debian_packages(tmp_path):
    r = _run(tmp_path, tmp_path / "no-such-python", "--venv")
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"install-deps: no {tmp_path / 'no-such-python'} on PATH; install Debian's: apt-get install python3 python3-venv"
    )


def test_unknown_option_is_a_usage_error(tmp_path):
    r = _run(tmp_path, tmp_path / "x", "--system")
    assert (r.returncode, r.stderr.strip()) == (2, "usage: scripts/install-deps.sh [--python | --venv]")
