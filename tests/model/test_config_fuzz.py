"""Fuzz: random mutations of the shipped stack files never end in a traceback.

Seeded (reproducible; a failure names its case), a few hundred cases in seconds. Each
case mutates Pulumi.dev.yaml or Pulumi.prod.yaml 1-3 times (delete a key, change a
type, out-of-range numbers, unicode and garbage strings, extra keys, lists truncated,
emptied or duplicated; a few cases damage the YAML text itself) and runs it through
`parse_config` and the render CLI's `main()` in this process. Every outcome must be
exit 0 or 2 with no traceback, and every line of a refusal must start with the stack
file's name or a config path (or be a `warning:`).

hypothesis is not in requirements-dev.txt, so a seeded `random.Random` drives it.
"""

from __future__ import annotations

import copy
import os
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from model.config import parse_config
from model.errors import ConfigError
from model.paths import ROOT
from offline.plan import main

REPO = Path(__file__).resolve().parents[2]
FUZZ_SEED = 20261201
# `make check` runs the first cases only (GPU_CLUSTER_FUZZ_CASES) to stay in its time
# budget; the seeded sequence is the same, so the full run covers those too.
CASES = int(os.environ.get("GPU_CLUSTER_FUZZ_CASES", "300"))
# A case the config accepts renders the whole plan (~0.35 s of CPU); the first ones do, the
# rest stop at parse_config, which keeps the test well under 20 s.
MAX_RENDERS = 8

STRINGS = [
    "",
    " ",
    "\u00fc\u00df\u4e2d\U0001d518",
    "zero\u200bwidth",
    "\x00nul",
    "line\nbreak",
    "a" * 3000,
    "../../etc/passwd",
    "${HOME}",
    "$(reboot)",
    "'; drop table",
    "%s%n%x",
    "-1",
    "1e400",
    "null",
    "ami-zzzzzzzz",
    "subnet-",
    "cr-0123456789abcdef0 ",
    "us-east-2z",
    "2026-13-45T99:99:99Z",
    "\ud7ff\ue000",
]
NUMBERS = [0, -1, 1, 2, 3, 7, 63, 64, 65, 10**9, 2**63, -(2**63) - 1, 3.5, -0.0, 1e308, float("inf"), float("nan")]


def _paths(node: Any, at: tuple = ()) -> list[tuple]:
    out = [at]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*at, i))
    return out


def _get(node: Any, path: tuple) -> Any:
    for p in path:
        node = node[p]
    return node


def _set(root: dict, path: tuple, value: Any) -> None:
    _get(root, path[:-1])[path[-1]] = value


def _mutate(rng: random.Random, doc: dict) -> str:
    """One mutation of the `gpu-cluster:cluster` object (sometimes of `config:`); says which."""
    config = doc["config"]
    cluster = config.get(ROOT)
    paths = [p for p in _paths(cluster) if p] if isinstance(cluster, dict) else []
    if rng.random() < 0.08 or not paths:
        key = rng.choice(["aws:region", ROOT])
        value = rng.choice([None, 5, ["us-east-2"], {"a": 1}, rng.choice(STRINGS), {"secure": "v1:abc"}])
        config[key] = value
        return f"config[{key!r}] = {value!r}"[:120]
    path = rng.choice(paths)
    parent, last = _get(cluster, path[:-1]), path[-1]
    current = parent[last]
    kind = rng.choice(["delete", "type", "number", "string", "extra", "list", "secure"])
    if kind == "delete":
        del parent[last]
    elif kind == "type":
        parent[last] = rng.choice([str(current), [current], {"x": current}, None, True, 0, []])
    elif kind == "number":
        parent[last] = rng.choice(NUMBERS)
    elif kind == "string":
        parent[last] = rng.choice(STRINGS)
    elif kind == "extra":
        target = current if isinstance(current, dict) else parent if isinstance(parent, dict) else cluster
        target[rng.choice(["zz_extra", "Name", "nodes", "1", "secure"])] = rng.choice([1, "x", None, {}])
    elif kind == "list":
        lists = [p for p in paths if isinstance(_get(cluster, p), list)]
        if not lists:
            del parent[last]
            return f"delete at {'.'.join(map(str, path))}"
        lp = rng.choice(lists)
        items = _get(cluster, lp)
        _set(cluster, lp, rng.choice([[], items[: max(0, len(items) - 1)], items + copy.deepcopy(items), items * 3]))
        path = lp
    else:
        parent[last] = {"secure": "v1:Zm9v"}
    return f"{kind} at {'.'.join(map(str, path))}"


def _damage_text(rng: random.Random, text: str) -> tuple[str, str]:
    i = rng.randrange(len(text))
    how = rng.choice(["cut", "insert", "truncate", "indent"])
    if how == "cut":
        return text[:i] + text[i + 1 :], f"text: cut char {i}"
    if how == "insert":
        junk = rng.choice([":", "[", "{", "\t", "- ", "&a ", "*b", "!!binary ", '"', "\n  x: 1\n"])
        return text[:i] + junk + text[i:], f"text: insert {junk!r} at {i}"
    if how == "truncate":
        return text[:i], f"text: truncate at {i}"
    lines = text.splitlines(keepends=True)
    j = rng.randrange(len(lines))
    lines[j] = " " + lines[j]
    return "".join(lines), f"text: indent line {j + 1}"


def _cases():
    rng = random.Random(FUZZ_SEED)
    docs = {s: yaml.safe_load((REPO / f"Pulumi.{s}.yaml").read_text()) for s in ("dev", "prod")}
    for n in range(CASES):
        stack = rng.choice(sorted(docs))
        doc = copy.deepcopy(docs[stack])
        what = [_mutate(rng, doc) for _ in range(rng.randint(1, 3))]
        text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
        if rng.random() < 0.1:
            text, how = _damage_text(rng, text)
            what.append(how)
        yield n, stack, doc, text, what


def test_fuzzed_stack_files_never_crash(tmp_path, capsys):
    renders = rendered_ok = refused = 0
    for n, stack, doc, text, what in _cases():
        case = f"case {n} ({stack}, random.Random({FUZZ_SEED})): {what}"
        raw = doc["config"].get(ROOT) if isinstance(doc.get("config"), dict) else None
        accepted = False
        try:
            parse_config(raw)
            accepted = True
        except ConfigError as err:
            assert err.problems and all(p.startswith(ROOT) for p, _ in err.problems), case
        if accepted and renders >= MAX_RENDERS:
            continue
        renders += accepted
        f = tmp_path / f"Pulumi.{stack}.yaml"
        f.write_text(text)
        code = main(["--stack", stack, "--config-file", str(f), "--out", str(tmp_path / "out")])
        out, err = capsys.readouterr()
        assert code in (0, 2), f"{case}: exit {code}: {err}"
        assert "Traceback" not in out + err, case
        lines = err.splitlines()
        if code == 0:
            rendered_ok += 1
            assert out.startswith(f"wrote {tmp_path}/out/plan.json: "), case
            assert all(line.startswith("warning: ") for line in lines), f"{case}: {lines}"
        else:
            refused += 1
            assert lines, case
            for line in lines:
                assert line.startswith((str(f), ROOT, "aws:region", "warning: ")), f"{case}: {line}"
    # The mutations reach both outcomes (a fuzz that only ever refuses tests little).
    assert rendered_ok >= 5 and refused >= CASES // 2, (rendered_ok, refused)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_shipped_stack_files_render(tmp_path, capsys, stack):
    """The fuzz starts from files that render as they are."""
    assert main(["--stack", stack, "--out", str(tmp_path)]) == 0
    assert "Traceback" not in capsys.readouterr().err
