"""`Pulumi.yaml`'s part in a stack's config, as the engine applies it [P-PROJECT-SCHEMA]:
its `config:` gives project-wide values (`value`, or a plain scalar or list) and defaults
(`default`), which count for every stack whose file does not set the key; the stack file
always wins, key by key. Also where the stack files are (`stackConfigDir`).

A key without a namespace, or in the project's (`gpu-cluster:`), may declare `type`
(string, integer, boolean, array: an array needs `items`), `description`, `secret`,
`default` or `value`; a key of another namespace (`aws:region`) may only give a `value`.
What the engine refuses is refused here too, each as `Pulumi.yaml: config.KEY: ...`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stackfile.errors import InputError
from stackfile.reader import StackLoader

PROJECT_FILE = "Pulumi.yaml"
SIMPLE_TYPES = ("string", "integer", "boolean", "array")
DECLARATION_KEYS = frozenset({"type", "items", "description", "secret", "default", "value"})
_CHECK = {"string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool)}
_CHECK["integer"] = lambda v: isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class Project:
    name: str
    stack_dir: Path
    # Full key (`gpu-cluster:cluster`, `aws:region`) -> the value a stack gets when its
    # file does not set the key.
    values: dict[str, Any] = field(default_factory=dict)


def _full_key(project: str, key: str) -> str:
    return key if ":" in key else f"{project}:{key}"


def _type_problem(name: str, decl: dict[str, Any]) -> str | None:
    typ = decl.get("type")
    if typ is not None and typ not in SIMPLE_TYPES:
        return f"type {typ!r}: Pulumi's project types are {', '.join(SIMPLE_TYPES)}"
    if typ == "array" and "items" not in decl:
        return "declares an array without `items` (its element type)"
    if typ in _CHECK and "default" in decl and not _CHECK[typ](decl["default"]):
        return f"default {decl['default']!r} is not of type {typ}"
    return None


def _declaration_problem(project: str, key: str, decl: Any) -> str | None:
    """Why the engine refuses this `config:` entry, or None."""
    if not isinstance(decl, dict):
        return None  # a plain value: string, number, boolean or list
    unknown = sorted(set(decl) - DECLARATION_KEYS)
    if unknown:
        return f"unknown attribute(s) {', '.join(unknown)}; a declaration has {', '.join(sorted(DECLARATION_KEYS))}"
    if "default" in decl and "value" in decl:
        return "has both `default` and `value`; keep one"
    if ":" in key and not key.startswith(f"{project}:"):
        if "type" in decl or "default" in decl:
            return "is not in the project's namespace: it may not declare a type or a default, only a `value`"
        if "value" not in decl:
            return "is not in the project's namespace and must give a `value`"
        return None
    return _type_problem(key, decl)


def _value(decl: Any) -> tuple[bool, Any]:
    if not isinstance(decl, dict):
        return True, decl
    for attr in ("value", "default"):
        if attr in decl:
            return True, decl[attr]
    return False, None


def read_project(root: Path) -> Project | None:
    """The project file in `root`, or None when there is none (a directory holding only
    stack files). InputError for a file the engine would refuse."""
    path = root / PROJECT_FILE
    if not path.is_file():
        return None
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=StackLoader)  # noqa: S506 - a SafeLoader
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as err:
        raise InputError([f"{PROJECT_FILE}: cannot be read: {' '.join(str(err).split())}"]) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        raise InputError([f"{PROJECT_FILE}: not a project file (a mapping with `name:` and `runtime:`)"])
    name = doc["name"]
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise InputError([f"{PROJECT_FILE}: `config:` is not a mapping of keys"])
    problems, values = [], {}
    for key, decl in config.items():
        why = _declaration_problem(name, str(key), decl)
        if why:
            problems.append(f"{PROJECT_FILE}: config.{key}: {why}")
            continue
        has, value = _value(decl)
        if has:
            values[_full_key(name, str(key))] = value
    if problems:
        raise InputError(problems)
    stack_dir = root / str(doc.get("stackConfigDir") or ".")
    return Project(name=name, stack_dir=stack_dir, values=values)
