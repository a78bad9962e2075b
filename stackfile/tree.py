"""A loaded stack file's values as the JSON the Pulumi engine hands the program."""

from __future__ import annotations

import json
import re
from datetime import date, datetime
from typing import Any

from stackfile.errors import InputError

# `pulumi config set --path --secret` stores a leaf as `{secure: <ciphertext>}`; only
# the Pulumi engine can decrypt it. Offline readers put this stand-in in its place
# (inside AWS's tag-value character set, so a secret tag value does not trip a tag
# rule) and never copy the ciphertext anywhere.
SECRET_PLACEHOLDER = "secret-not-decrypted"
# A stack file is a few hundred values; a YAML alias bomb expands into millions.
_MAX_VALUES = 100_000
# YAML types with no JSON form (the engine hands the program JSON).
_YAML_ONLY: dict[type, str] = {bytes: "binary data (!!binary)", set: "a set (!!set)", tuple: "a pair list (!!pairs)"}


def json_default(value: Any) -> str:
    """YAML reads an unquoted `2026-12-08T11:30:00Z` as a datetime; config is JSON text."""
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def type_name(value: Any) -> str:
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def join_path(path: str, key: str | int) -> str:
    """`path` and one more key or index, spelled as `pulumi config set --path` reads it."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$-]*", key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key)}]"


def is_secure(value: Any) -> bool:
    """Pulumi's secure leaf: a mapping whose only key is `secure` (reserved by Pulumi)."""
    return isinstance(value, dict) and len(value) == 1 and "secure" in value


class _Walk:
    """One pass over a value: counts values (alias bombs), tracks the containers being
    walked (an alias containing itself), collects secret paths and problems."""

    def __init__(self, root: str, secrets: list[str], problems: list[str]):
        self.root, self.secrets, self.problems = root, secrets, problems
        self.count = 0
        self.active: set[int] = set()

    def value(self, v: Any, at: str) -> Any:
        self.count += 1
        if self.count > _MAX_VALUES:
            raise InputError([f"{self.root}: more than {_MAX_VALUES} values (a YAML alias expanding into itself?)"])
        if is_secure(v):
            self.secrets.append(at)
            return SECRET_PLACEHOLDER
        if isinstance(v, (dict, list)):
            return self.container(v, at)
        if isinstance(v, datetime):
            return json_default(v)
        if isinstance(v, date):
            return v.isoformat()
        if v is None or isinstance(v, (str, int, float, bool)):
            return v
        self.problems.append(
            f"{at}: {_YAML_ONLY.get(type(v), type_name(v))} is not a config value; write a string, number, list or mapping"
        )
        return None

    def container(self, v: dict[Any, Any] | list[Any], at: str) -> Any:
        if id(v) in self.active:
            self.problems.append(f"{at}: a YAML alias that contains itself; write the value out")
            return None
        self.active.add(id(v))
        try:
            if isinstance(v, dict):
                out = {}
                for k, item in v.items():
                    key = json.dumps(k) if isinstance(k, (bool, type(None))) else k
                    key = key if isinstance(key, str) else str(key)
                    out[key] = self.value(item, join_path(at, key))
                return out
            return [self.value(item, join_path(at, i)) for i, item in enumerate(v)]
        finally:
            self.active.discard(id(v))


def to_config_tree(value: Any, path: str, secrets: list[str], problems: list[str]) -> Any:
    """YAML as the JSON the Pulumi engine hands the program: timestamps and dates as
    ISO text, keys as strings, secure leaves replaced by SECRET_PLACEHOLDER (their paths
    collected in `secrets`). What JSON cannot carry is a problem at its path."""
    return _Walk(path, secrets, problems).value(value, path)
