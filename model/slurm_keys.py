"""What Slurm 23.11 (the nodes' Ubuntu 24.04 Slurm) accepts in slurm.conf, cgroup.conf and gres.conf.

The data is `slurm_keys_23_11.json`, extracted from the 23.11.4 release source by
`python -m offline.slurm_key_table` [SLURM-SRC-2311] (its parser tables, value parsers and plugin names;
the docstring there says what comes from where). This module only reads it:
- `KeyTable.key_problem(conf, key)`: a key 23.11 does not know (with the nearest known
  spelling), or one it calls defunct;
- `KeyTable.value_problem(conf, key, value)`: a value its parser refuses (numbers out of
  range, booleans, the words of SelectTypeParameters and friends, plugin names);
- `KeyTable.problems(conf, text)`: every problem of a whole file, `LINE: message`.
Slurm matches keys without regard to case (parse_config.c hashes and compares them
case-insensitively), so `DefCpuPerGPU` is the table's `DefCPUPerGPU`.

A line is parsed as Slurm does: `Key=Value` pairs separated by blanks, values optionally
in double quotes, `#` to the end of the line a comment. When the line's first key is a
line key (NodeName, PartitionName, gres.conf's Name, ...), the rest of the line belongs
to that key's own table.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

TABLE_23_11 = Path(__file__).with_name("slurm_keys_23_11.json")
CONF_FILES = ("slurm.conf", "cgroup.conf", "gres.conf")

# parse_config.c's key/value pattern: key of [alnum_.], an optional operator before `=`,
# blanks around it, a quoted or a blank-free value.
_PAIR = re.compile(r'\s*([A-Za-z0-9_.]+)\s*[-*+/]?=\s*(?:"([^"]*)"|(\S+))(?=\s|$)')
_LIMITS = {"uint16": 0xFFFF, "uint32": 0xFFFFFFFF, "uint64": 0xFFFFFFFFFFFFFFFF}
_INFINITE = ("UNLIMITED", "INFINITE")


@dataclass(frozen=True)
class KeyTable:
    data: dict = field(repr=False)

    @property
    def version(self) -> str:
        return str(self.data["slurm"])

    def keys(self, conf: str, line: str | None = None) -> dict[str, str]:
        """Key -> value type (`string`, `uint16`, ..., `array` for a line key, `defunct`)."""
        table = self.data["files"][conf]
        return dict(table["lines"][line] if line else table["keys"])

    def canonical(self, conf: str, key: str, line: str | None = None) -> str | None:
        """The source's spelling of a key, matched without regard to case; None if unknown."""
        lower = key.lower()
        return next((k for k in self.keys(conf, line) if k.lower() == lower), None)

    def line_key(self, conf: str, key: str) -> str | None:
        """The canonical line key (NodeName, PartitionName, Name, ...), or None."""
        name = self.canonical(conf, key)
        return name if name and name in self.data["files"][conf]["lines"] else None

    def key_problem(self, conf: str, key: str, line: str | None = None) -> str | None:
        where = f"{line} line" if line else conf
        name = self.canonical(conf, key, line)
        if name is None:
            near = difflib.get_close_matches(key, list(self.keys(conf, line)), n=1, cutoff=0.75)
            hint = f" (did you mean {near[0]}?)" if near else ""
            return f"{key}: not a {where} key in Slurm {self.version}{hint}"
        if self.keys(conf, line)[name] == "defunct":
            return f"{key}: defunct in Slurm {self.version} (slurmctld logs 'please remove it from {conf}')"
        return None

    def value_problem(self, conf: str, key: str, value: str, line: str | None = None) -> str | None:
        """Why Slurm 23.11 would refuse `key=value` (None when it accepts it)."""
        unknown = self.key_problem(conf, key, line)
        name = self.canonical(conf, key, line)
        if unknown or name is None:
            return unknown
        kind = self.keys(conf, line)[name]
        problem = _type_problem(kind, value, self.data["boolean"])
        if problem is None and line is None:
            problem = self._word_problem(conf, name, value)
        return f"{key}={value}: {problem}" if problem else None

    def _word_problem(self, conf: str, name: str, value: str) -> str | None:
        rule = self.data["values"].get(conf, {}).get(name)
        if rule is None:
            return None
        if rule["numbers"] and value.isdigit():
            return None
        fold = str.lower if rule["ignore_case"] else str
        allowed = {fold(w) for w in rule["words"]}
        items = value.split(",") if rule["list"] else [value]
        bad = [i for i in items if fold(i) not in allowed and not _rlimit(name, i, allowed)]
        if not bad:
            return None
        what = f"{rule['plugin_type']} plugin" if "plugin_type" in rule else "value"
        return f"{', '.join(bad)} is not a {what} Slurm {self.version} knows; it knows {', '.join(rule['words'])}"

    def pairs(self, text: str) -> tuple[list[tuple[str, str]], str]:
        """The key/value pairs of one line (comment removed) and any text left unparsed."""
        text = re.sub(r"(?<!\\)#.*", "", text).strip()
        out: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            m = _PAIR.match(text, pos)
            if not m:
                return out, text[pos:].strip()
            out.append((m.group(1), m.group(2) if m.group(2) is not None else m.group(3)))
            pos = m.end()
        return out, ""

    def line_problems(self, conf: str, text: str) -> list[str]:
        pairs, rest = self.pairs(text)
        problems = [f"cannot parse {rest!r}"] if rest else []
        if pairs and self.line_key(conf, pairs[0][0]):
            line = self.line_key(conf, pairs[0][0])
            problems += [p for k, v in pairs[1:] if (p := self.value_problem(conf, k, v, line))]
            return problems
        return problems + [p for k, v in pairs if (p := self.value_problem(conf, k, v))]

    def problems(self, conf: str, text: str) -> list[str]:
        """Every problem of a whole file, as `LINE: message` (`include` lines are not followed)."""
        if conf not in CONF_FILES:
            raise ValueError(f"{conf}: the table covers {', '.join(CONF_FILES)}")
        out = []
        for number, raw in enumerate(text.splitlines(), 1):
            if re.match(r"\s*include\s", raw, re.I):
                continue
            out += [f"{number}: {p}" for p in self.line_problems(conf, raw)]
        return out


def _rlimit(name: str, item: str, allowed: set[str]) -> bool:
    # parse_rlimits takes a resource with or without its RLIMIT_ prefix.
    return name.startswith("PropagateResourceLimits") and item.startswith("RLIMIT_") and item[7:] in allowed


def _type_problem(kind: str, value: str, boolean: dict[str, list[str]]) -> str | None:
    """What parse_value.c's handler for `kind` says about value (None: accepted)."""
    if kind == "boolean" and value.lower() not in boolean["true"] + boolean["false"]:
        return f"not a boolean (Slurm takes {', '.join(boolean['true'] + boolean['false'])})"
    if kind in _LIMITS:
        return _number_problem(kind, value)
    if kind == "float":
        try:
            float(value)
        except ValueError:
            return "not a number"
    return None


def _number_problem(kind: str, value: str) -> str | None:
    if value.upper() in _INFINITE:
        return None
    # strtoul(value, 0): decimal, 0x hex or 0 octal; 32- and 64-bit values take a k suffix.
    text = value[:-1] if kind != "uint16" and value[-1:] in ("k", "K") else value
    try:
        number = int(text, 0) if not re.fullmatch(r"0\d+", text) else int(text, 8)
    except ValueError:
        return f"not a number ({kind})"
    if number < 0 or number * (1024 if text != value else 1) > _LIMITS[kind]:
        return f"out of range for {kind} (0..{_LIMITS[kind]})"
    return None


@cache
def table_23_11() -> KeyTable:
    """The table of Slurm 23.11.4 (read once)."""
    return KeyTable(json.loads(TABLE_23_11.read_text()))
