"""Stack-file YAML: render one key's lines, and set that key with a targeted text edit.

A YAML round trip (load, change, dump) would drop every comment of the stack file and
reorder its keys, so `ops pin --write` edits the text: it finds the key's block by indentation,
replaces only that block (keeping the key line's own comment), then loads the result
and checks that exactly that key changed. Anything it cannot edit that way (a flow
mapping on the path, comments inside the block) is refused; the printed lines are then
pasted by hand.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from copy import deepcopy
from pathlib import Path
from typing import Any

import yaml

from model.paths import CONFIG_KEY, CONFIG_NAMESPACE
from stackfile.reader import StackLoader

INDENT = 2


class EditRefused(ValueError):
    """The key cannot be set by a text edit; the file is left as it was."""


# `key:` ends at the first colon followed by a space or the line end, so keys with
# colons (`gpu-cluster:cluster`, `aws:region`) match whole.
_KEY = re.compile(r"^(?P<indent> *)(?P<key>\"[^\"]*\"|'[^']*'|[^\s#'\"-][^#]*?):(?P<rest>\s.*)?$")


def scalar(value: Any) -> str:
    """A YAML scalar that loads back as `value` ("2.15" stays a string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    try:
        plain_ok = yaml.safe_load(f"k: {text}") == {"k": text}
    except yaml.YAMLError:
        plain_ok = False
    return text if plain_ok and text.strip() == text else json.dumps(text)


def mapping_lines(key: str, values: dict[str, Any], comment: str | None = None) -> list[str]:
    """`key:` then one `field: value` line per non-null value, indented by INDENT."""
    head = f"{key}:" + (f"  # {comment}" if comment else "")
    return [head] + [f"{' ' * INDENT}{k}: {scalar(v)}" for k, v in values.items() if v is not None]


def scalar_line(key: str, value: Any, comment: str | None = None) -> list[str]:
    return [f"{key}: {scalar(value)}" + (f"  # {comment}" if comment else "")]


class _Lines:
    def __init__(self, text: str):
        self.lines = text.splitlines()

    @staticmethod
    def content(line: str) -> bool:
        s = line.strip()
        return bool(s) and not s.startswith("#")

    @staticmethod
    def indent(line: str) -> int:
        return len(line) - len(line.lstrip(" "))

    def block_end(self, start: int) -> int:
        """End (exclusive) of the block whose key is at `start`: before the next content
        line at the same or lower indent; trailing blank and comment lines stay outside."""
        base = self.indent(self.lines[start])
        end = start + 1
        last = start + 1
        while end < len(self.lines):
            line = self.lines[end]
            if self.content(line):
                if self.indent(line) <= base:
                    break
                last = end + 1
            end += 1
        return last

    def find(self, key: str, lo: int, hi: int, indent: int) -> int | None:
        for i in range(lo, hi):
            m = _KEY.match(self.lines[i])
            if m and len(m["indent"]) == indent and m["key"].strip("\"'") == key:
                return i
        return None

    def child_indent(self, lo: int, hi: int, parent_indent: int) -> int:
        for i in range(lo, hi):
            if self.content(self.lines[i]):
                return self.indent(self.lines[i])
        return parent_indent + INDENT


def _inline_value(line: str) -> str:
    m = _KEY.match(line)
    rest = (m["rest"] or "") if m else ""
    return rest.split(" #")[0].strip() if not rest.strip().startswith("#") else ""


def set_key(text: str, path: list[str], new_lines: list[str]) -> str:
    """`text` with the key `path[-1]` (under the mappings `path[:-1]`) replaced by
    `new_lines` (its own key line first, children relative to it). Missing parent
    mappings are created at the end of their parent."""
    doc = _Lines(text)
    label = ".".join(k for k in path if k != "config")
    lo, hi, indent = 0, len(doc.lines), 0
    parent_indent = -INDENT
    for depth, key in enumerate(path):
        last = depth == len(path) - 1
        at = doc.find(key, lo, hi, indent)
        if at is None:
            # Insert `key` (and the rest of the path) at the end of the parent block.
            insert = hi
            while insert > lo and not doc.content(doc.lines[insert - 1]):
                insert -= 1
            added: list[str] = []
            for d, k in enumerate(path[depth:-1]):
                added.append(" " * (indent + d * INDENT) + f"{k}:")
            pad = indent + (len(path) - 1 - depth) * INDENT
            added += [" " * pad + line for line in new_lines]
            doc.lines[insert:insert] = added
            return "\n".join(doc.lines) + "\n"
        end = doc.block_end(at)
        if last:
            inner = doc.lines[at + 1 : end]
            if any(line.strip().startswith("#") for line in inner):
                raise EditRefused(f"{label} has comment lines inside it; edit it by hand with the lines above")
            m = _KEY.match(doc.lines[at])
            own_comment = ""
            if m and m["rest"] and m["rest"].strip().startswith("#") and len(new_lines) > 1:
                own_comment = "  " + m["rest"].strip()  # `pinned:  # why` keeps its comment
            first = new_lines[0] if not own_comment or "#" in new_lines[0] else new_lines[0] + own_comment
            rendered = [" " * indent + first] + [" " * indent + line for line in new_lines[1:]]
            doc.lines[at:end] = rendered
            return "\n".join(doc.lines) + "\n"
        if _inline_value(doc.lines[at]):
            raise EditRefused(
                f"{'.'.join(k for k in path[: depth + 1] if k != 'config')} is written inline (flow style); edit it by hand with the "
                "lines above"
            )
        parent_indent = indent
        lo, hi = at + 1, end
        indent = doc.child_indent(lo, hi, parent_indent)
    raise AssertionError("unreachable")  # pragma: no cover


def _load(text: str) -> Any:
    """The strict reader's view (an edit that made a duplicate key is refused, not
    silently read as its last value)."""
    try:
        return yaml.load(text, Loader=StackLoader)
    except yaml.YAMLError as err:
        raise EditRefused(f"the edited file does not load: {' '.join(str(err).split())}") from None


CLUSTER_PATH = ["config", f"{CONFIG_NAMESPACE}:{CONFIG_KEY}"]


def write_key(file: Path, keys: list[str], new_lines: list[str], value: Any) -> None:
    """Set `gpu-cluster:cluster.<keys>` to `value` by a text edit of `file`; refuse (and
    leave the file alone) unless the edited file loads as the old one with only that
    key changed."""
    text = file.read_text()
    new_text = set_key(text, CLUSTER_PATH + keys, new_lines)
    expected = deepcopy(_load(text)) or {}
    node = expected
    for k in CLUSTER_PATH + keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    if _load(new_text) != expected:
        raise EditRefused(
            f"could not set {'.'.join(keys)} in {file.name} by a text edit without changing anything "
            "else; paste the lines above by hand"
        )
    fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(new_text)
        os.chmod(tmp, file.stat().st_mode & 0o777)
        os.replace(tmp, file)  # atomic: a crash leaves the old file, never half a file
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
