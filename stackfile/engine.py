"""A stack's config as the engine assembles it, for the tools that run beside the program
(`ops`, the plan writer): the program itself gets it from the engine (`pulumi.Config`).

Two sources, chosen by `source` (`GPU_CLUSTER_CONFIG_SOURCE`: auto, pulumi, files):
- `pulumi`: `pulumi config --json --open --stack STACK` in the project directory, which
  applies the project's values and defaults and the stack's ESC environments the way
  `pulumi up` does [P-CONFIG-JSON]. A key holding a secure value comes back without its
  value; for the cluster object the stack file's own copy is used then (secure leaves
  stay opaque, as offline).
- `files`: the stack file, then `Pulumi.yaml`'s values and defaults for every key it
  does not set (stackfile/project.py); no ESC environments (they need the backend).
`auto` (the default) uses the CLI when one is on PATH and falls back to the files, with a
note, when it fails (not logged in, the stack not created yet).

This is the one module of stackfile/ that runs a program; the rest is pure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.paths import REGION_PATH, ROOT
from stackfile.errors import InputError
from stackfile.location import stack_file
from stackfile.project import read_project
from stackfile.reader import read_stack_file
from stackfile.tree import SECRET_PLACEHOLDER

SOURCE_ENV = "GPU_CLUSTER_CONFIG_SOURCE"
SOURCES = ("auto", "pulumi", "files")
CLI_TIMEOUT = 120


@dataclass
class StackConfig:
    raw: Any  # the `gpu-cluster:cluster` object
    region: Any
    path: Path  # the stack file
    secret_paths: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    source: str = "files"


def source_from_env() -> str:
    value = os.environ.get(SOURCE_ENV, "auto") or "auto"
    if value not in SOURCES:
        raise InputError([f"{SOURCE_ENV}={value}: one of {', '.join(SOURCES)}"])
    return value


def from_files(stack: str, root: Path, config_file: Path | None = None) -> StackConfig:
    project = read_project(root)
    path = stack_file(stack, project.stack_dir if project else root, config_file)
    raw, region, secrets, problems = read_stack_file(path, root)
    if project is not None:
        raw = project.values.get(ROOT) if raw is None else raw
        region = project.values.get(REGION_PATH) if region is None else region
    return StackConfig(raw, region, path, secrets, problems)


def _cli_json(pulumi: str, stack: str, root: Path, config_file: Path | None) -> dict[str, Any]:
    argv = [pulumi, "config", "--json", "--open", "--stack", stack]
    if config_file is not None:
        argv += ["--config-file", str(config_file)]
    try:
        done = subprocess.run(
            argv, cwd=root, capture_output=True, text=True, timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RuntimeError(f"`pulumi config` did not run: {err}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise RuntimeError(f"`pulumi config --stack {stack}` failed: {last}")
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise RuntimeError("`pulumi config --json` printed no JSON") from None
    if not isinstance(doc, dict):
        raise RuntimeError("`pulumi config --json` printed no mapping of keys")
    return doc


def _entry_value(entry: Any) -> tuple[bool, Any]:
    """(present, value) of one `pulumi config --json` entry; a secret without its value
    (not shown without --show-secrets) is not present."""
    if not isinstance(entry, dict):
        return False, None
    if "objectValue" in entry:
        return True, entry["objectValue"]
    if "value" not in entry:
        return False, None
    return True, entry["value"]


def from_cli(pulumi: str, stack: str, root: Path, config_file: Path | None = None) -> StackConfig:
    doc = _cli_json(pulumi, stack, root, config_file)
    files = from_files(stack, root, config_file)
    cfg = StackConfig(files.raw, files.region, files.path, files.secret_paths, files.problems, source="pulumi")
    has, value = _entry_value(doc.get(ROOT))
    if has:
        cfg.raw = json.loads(value) if isinstance(value, str) and value.lstrip().startswith("{") else value
    elif isinstance(doc.get(ROOT), dict) and doc[ROOT].get("secret"):
        cfg.notes.append(
            f"{ROOT} holds a secure value, which `pulumi config` shows only with --show-secrets; "
            f"read it from {files.path.name} (secure leaves as {SECRET_PLACEHOLDER!r})"
        )
    has, value = _entry_value(doc.get(REGION_PATH))
    if has:
        cfg.region = value
    return cfg


def read_config(stack: str, root: Path, config_file: Path | None = None, source: str = "files") -> StackConfig:
    """The stack's config from `source` (see the module docstring). InputError when the
    stack file cannot be used, or when `pulumi` was asked for and did not answer."""
    pulumi = shutil.which("pulumi") if source != "files" else None
    if source == "pulumi" and pulumi is None:
        raise InputError([f"{SOURCE_ENV}=pulumi: no `pulumi` on PATH; install the Pulumi CLI or use files"])
    if pulumi is None:
        return from_files(stack, root, config_file)
    try:
        return from_cli(pulumi, stack, root, config_file)
    except RuntimeError as err:
        if source == "pulumi":
            raise InputError([str(err)]) from None
        cfg = from_files(stack, root, config_file)
        cfg.notes.append(f"{err}; read {cfg.path.name} and {Path('Pulumi.yaml')} instead (no ESC environments)")
        return cfg
