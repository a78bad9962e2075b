"""The version has one home (model/version.py): the package metadata, the policy pack
and every `--version` read it; nothing else spells the number."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from model.version import PROJECT, VERSION, version_line

ROOT = Path(__file__).resolve().parents[2]
# PEP 440's public version, the subset we release (N.N.N with an optional pre-release).
RELEASE = re.compile(r"^\d+\.\d+\.\d+((a|b|rc)\d+)?$")


def test_version_is_a_release_number():
    assert RELEASE.match(VERSION), VERSION


def test_pyproject_reads_the_version_from_its_home():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "model.version.VERSION"}


def test_policy_pack_carries_the_same_version():
    pack = yaml.safe_load((ROOT / "policy" / "PulumiPolicy.yaml").read_text())
    assert str(pack["version"]) == VERSION


def test_version_line_names_program_and_project():
    assert version_line("gpu-cluster-ops") == f"gpu-cluster-ops ({PROJECT}) {VERSION}"
    assert version_line(PROJECT) == f"{PROJECT} {VERSION}"


def test_newest_released_changelog_entry_is_this_version():
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    released = [h for h in headings if h != "Unreleased"]
    assert released and released[0] == VERSION, headings
