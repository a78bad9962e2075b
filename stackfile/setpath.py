"""`--set PATH=VALUE`: the path syntax and value rules of `pulumi config set --path`.

Paths: `a.b`, `a[0]`, `a["key.with.dots"]` (with `\\"` inside quotes), optionally led
by `cluster.` or `gpu-cluster:cluster.`; a bare `.N` on a list indexes it too (the plan
CLI accepted `capacity_blocks.0.x` first). As in Pulumi, an index may be the list's
length (appends) and no more, and missing maps/lists on the way are created.
Values: what `pulumi config set --path` stores (`true`/`false` are booleans, whole
numbers without a leading zero are integers, anything else is a string, so `2.15`
and `yes` stay strings), plus one extension: a value starting with `[`, `{` or a
quote is YAML flow (a list, a mapping, a quoted string), which Pulumi can only
build with one command per leaf.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from model.paths import CONFIG_KEY, CONFIG_NAMESPACE, ROOT
from stackfile.errors import InputError
from stackfile.reader import StackLoader
from stackfile.tree import join_path, to_config_tree, type_name

ConfigPath = list[str | int]


def _quoted_key(text: str, i: int) -> tuple[str, int]:
    """The key of `["..."]` starting at `i` (the `[`), and the index after its `]`."""
    key, j = [], i + 2
    while True:
        if j >= len(text):
            raise ValueError("missing closing quote in a quoted key")
        if text[j] == '"':
            j += 1
            break
        if text.startswith('\\"', j):
            key.append('"')
            j += 2
        else:
            key.append(text[j])
            j += 1
    if j >= len(text) or text[j] != "]":
        raise ValueError("missing ']' after a quoted key")
    return "".join(key), j + 1


def _index(text: str, i: int) -> tuple[int, int]:
    """The list index of a `[0]`-style part starting at `i`, and the index after its `]`."""
    close = text.find("]", i)
    if close == -1:
        raise ValueError("missing ']' after a list index")
    index = text[i + 1 : close]
    if not re.fullmatch(r"\d+", index):
        raise ValueError(f'[{index}] is not a list index (a whole number from 0, or ["key"] for a key)')
    return int(index), close + 1


def parse_config_path(text: str) -> ConfigPath:
    """Pulumi's property path grammar; ValueError with the reason."""
    parts: ConfigPath = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == ".":
            i += 1
            continue
        part: str | int
        if c == "[":
            part, i = _quoted_key(text, i) if text.startswith('["', i) else _index(text, i)
        else:
            j = i
            while j < len(text) and text[j] not in ".[":
                j += 1
            part, i = text[i:j], j
        parts.append(part)
    if not parts:
        raise ValueError("empty path")
    if any(p == "" for p in parts):
        raise ValueError("empty key")
    return parts


def parse_set_value(text: str) -> Any:
    if text[:1] in ("[", "{", '"', "'"):
        try:
            return yaml.load(text, Loader=StackLoader)
        except yaml.MarkedYAMLError as err:
            mark = err.problem_mark
            where = f" at character {mark.column + 1}" if mark and mark.line == 0 else ""
            raise ValueError(f"the value does not parse as YAML flow{where}: {err.problem or err.context}") from None
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?(0|[1-9][0-9]*)", text):
        return int(text)
    return text


def _display(parts: ConfigPath) -> str:
    path = "cluster"
    for p in parts:
        path = join_path(path, p)
    return path


def _cluster_parts(path_text: str, fail: Any) -> ConfigPath:
    """The path below `gpu-cluster:cluster` that `path_text` names."""
    ns, colon, rest = path_text.partition(":")
    if colon and not re.search(r"[.\[]", ns):
        if ns != CONFIG_NAMESPACE:
            raise fail(f"only {ROOT} (and aws:region) can be set here, not the {ns}: namespace")
        inner = rest
    else:
        inner = path_text
    try:
        parts = parse_config_path(inner)
    except ValueError as err:
        raise fail(f"not a config path: {err}") from None
    if colon and (not parts or parts[0] != CONFIG_KEY):
        raise fail(f"a {CONFIG_NAMESPACE}: path starts with {ROOT}")
    if parts and parts[0] == CONFIG_KEY:
        parts = parts[1:]
    if not parts:
        raise fail("set single keys (e.g. capacity.nodes=4); the whole object lives in the stack file")
    return parts


def _step(node: Any, part: str | int, here: str, fail: Any) -> str | int:
    """`part` as a key of `node` (appending a slot for an index one past a list's end)."""
    if isinstance(node, list):
        if isinstance(part, str):
            if not part.isdigit():
                raise fail(f"{here} is a list; index it with [N], not .{part}")
            part = int(part)
        if part > len(node):
            size = f"{len(node)} item{'s' if len(node) != 1 else ''}"
            change = f"[0] to [{len(node) - 1}]" if len(node) > 1 else "[0]"
            use = f"use {change} to change one, [{len(node)}] to append" if node else "use [0] to append"
            raise fail(f"index {part} is out of range: {here} has {size} ({use})")
        if part == len(node):
            node.append(None)
    elif isinstance(node, dict):
        if isinstance(part, int):
            raise fail(f'{here} is a mapping, not a list; use .key or ["key"], not [{part}]')
    else:
        raise fail(
            f"{here} is {type_name(node)}, so it has no {'item' if isinstance(part, int) else 'key'} "
            f"{part if isinstance(part, int) else repr(part)}; set {here} itself"
        )
    return part


def _set_in(raw: Any, parts: ConfigPath, value: Any, fail: Any) -> Any:
    tree = json.loads(json.dumps(raw if raw is not None else {}))
    node: Any = tree
    for i, part in enumerate(parts):
        part = _step(node, part, _display(parts[:i]), fail)
        if i == len(parts) - 1:
            node[part] = value
            break
        child = node.get(part) if isinstance(node, dict) else node[part]
        if child is None:
            child = [] if isinstance(parts[i + 1], int) else {}
            node[part] = child
        node = child
    return tree


def apply_override(raw: Any, assignment: str, secrets: list[str] | None = None) -> Any:
    """A copy of `raw` with one `PATH=VALUE` applied (syntax above); InputError if not.
    Paths of secure values set (`{secure: ...}`) are added to `secrets`."""
    path_text, sep, text = assignment.partition("=")
    shown = path_text or assignment
    if not sep or not path_text.strip():
        raise InputError([f"--set {shown}: expected PATH=VALUE, e.g. capacity.nodes=4 or 'tags[\"team.name\"]=ml'"])

    def fail(msg: str) -> InputError:
        return InputError([f"--set {path_text}: {msg}"])

    parts = _cluster_parts(path_text, fail)
    try:
        value = parse_set_value(text)
    except ValueError as err:
        raise fail(str(err)) from None
    problems: list[str] = []
    set_secrets: list[str] = []
    value = to_config_tree(value, _display(parts), set_secrets, problems)
    if problems:
        raise InputError([f"--set {p}" for p in problems])
    if secrets is not None:
        secrets.extend(s.replace("cluster", ROOT, 1) for s in set_secrets)
    return _set_in(raw, parts, value, fail)
