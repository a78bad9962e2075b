"""pyproject.toml as a package: dependency ranges that admit exactly-locked versions,
entry points that resolve, every top-level package shipped. The built wheel in a fresh
virtualenv is tests/package/test_wheel.py."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from model.version import VERSION

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s\\;]+)", re.M)


def _locked(lock: str) -> dict[str, str]:
    return {name.lower().replace("_", "-"): version for name, version in PIN.findall((ROOT / lock).read_text())}


def _direct(infile: str) -> dict[str, str]:
    text = "\n".join(line for line in (ROOT / infile).read_text().splitlines() if not line.startswith("-"))
    return {name.lower().replace("_", "-"): version for name, version in PIN.findall(text)}


def _declared(group: list[str]) -> dict[str, Requirement]:
    reqs = [Requirement(r) for r in group]
    return {r.name.lower().replace("_", "-"): r for r in reqs}


def test_runtime_dependencies_are_ranges_admitting_the_locked_versions():
    declared = _declared(PROJECT["project"]["dependencies"] + PROJECT["project"]["optional-dependencies"]["policy"])
    locked = _locked("requirements.txt")
    # The same direct dependencies as requirements.in, each a range, never one version.
    assert sorted(declared) == sorted(_direct("requirements.in"))
    for name, req in declared.items():
        assert not any(s.operator == "==" for s in req.specifier), f"{req}: a range, not a pin"
        assert any(s.operator == "<" for s in req.specifier), f"{req}: bounded above (next major)"
        assert req.specifier.contains(locked[name]), f"{req} refuses the locked {name}=={locked[name]}"


def test_dev_dependencies_are_ranges_admitting_the_locked_versions():
    declared = _declared(PROJECT["project"]["optional-dependencies"]["dev"])
    locked = _locked("requirements-dev.txt")
    assert sorted(declared) == sorted(_direct("requirements-dev.in"))
    for name, req in declared.items():
        assert not any(s.operator == "==" for s in req.specifier), f"{req}: a range, not a pin"
        assert req.specifier.contains(locked[name]), f"{req} refuses the locked {name}=={locked[name]}"


def test_console_entry_points_resolve_to_callables():
    scripts = PROJECT["project"]["scripts"]
    assert sorted(scripts) == ["gpu-cluster-ops", "gpu-cluster-plan", "gpu-cluster-verdict"]
    for target in scripts.values():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), target


def test_every_top_level_package_ships():
    include = PROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = sorted(p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name != "tests")
    assert sorted(i.removesuffix("*") for i in include) == packages
    assert PROJECT["tool"]["setuptools"]["package-data"]["policy"] == ["PulumiPolicy.yaml", "requirements.txt"]


def test_policy_pack_requires_this_version_of_the_package():
    lines = [
        line for line in (ROOT / "policy" / "requirements.txt").read_text().splitlines() if line and line[0] != "#"
    ]
    assert f"gpu-cluster=={VERSION}" in lines
    assert any(line.startswith("pulumi-policy") for line in lines)


def test_license_is_apache_2():
    assert PROJECT["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
