"""Every shell block in README.md, CONTRIBUTING.md, SECURITY.md, docs/ and examples/ is
checked: each command exists (on this machine, in venv/, in the repository, or as a
program the nodes get), each `make` target exists, each repository file it names exists,
each `python -m` module imports, and there is one interpreter spelling: `venv/bin/python`
(bare `python3` only to create a virtualenv or to run a node's own file)."""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "SECURITY.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").rglob("*.md")),
]
SHELL = ("bash", "sh", "shell")
FENCE = re.compile(r"^```(\S*)\s*$")
HEREDOC = re.compile(r"<<-?\s*'?\"?(\w+)'?\"?")
# Tools the README lists as prerequisites of the real path (installed by the user).
PREREQUISITES = {"pulumi", "aws"}
# What runs on a cluster node, documented where it is used: Slurm's and the OS's own
# commands (the node image has them), and the programs we ship (checked against the
# rendered node files below).
NODE_TOOLS = {"sinfo", "squeue", "sbatch", "srun", "scontrol", "sacct", "enroot", "nvidia-smi", "dcgmi"}
NODE_BIN = ROOT / "tests" / "golden" / "userdata" / "common" / "files" / "opt" / "gpu-cluster"
SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", "{", "}"}
BUILTINS = {"cd", "export", "echo", "test", "[", "for", "do", "done", "if", "then", "fi", "set", "source", "."}
# zsh's own builtin and function for bash completion scripts (docs/cli.md): not on PATH anywhere.
BUILTINS |= {"autoload", "bashcompinit"}
TOP = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")} - {"venv", "build", "vendor"}


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    words: tuple[str, ...]
    writes: tuple[str, ...] = ()  # files its redirections create

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {shlex.join(self.words)}"


def _blocks(text: str):
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            if m.group(1) in SHELL:
                yield i + 2, lines[i + 1 : j]
            i = j
        i += 1


def _logical_lines(start: int, lines: list[str]):
    """(line number, text): continuations joined, heredoc bodies skipped."""
    i, end_marker = 0, None
    while i < len(lines):
        no, text = start + i, lines[i]
        if end_marker is not None:
            end_marker = None if text.strip() == end_marker else end_marker
            i += 1
            continue
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1] + " " + lines[i]
        m = HEREDOC.search(text)
        if m:
            end_marker, text = m.group(1), text[: m.start()]
        yield no, text
        i += 1


def _commands(doc: str, text: str) -> list[Command]:
    out = []
    for start, lines in _blocks(text):
        for no, text in _logical_lines(start, lines):
            # Usage notation (`[--format markdown|text]`, `...`) is not a command line;
            # a command substitution is checked as a command of its own.
            text = re.sub(r"\s\[[^\]]*\]", " ", text).replace("$(", " ; ").replace("`", " ; ")
            lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            lexer.commenters = "#"
            words: list[str] = []
            writes: list[str] = []
            redirect = False
            for token in [*lexer, ";"]:
                if redirect:
                    writes.append(token)
                    redirect = False
                    continue
                if token in SEPARATORS or token.startswith((";", "&", "|")) and set(token) <= set(";&|"):
                    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                        words.pop(0)
                    if words and words[0] != "...":
                        out.append(Command(doc, no, tuple(words), tuple(writes)))
                    words, writes = [], []
                elif token in (">", ">>"):
                    redirect = True
                elif token != "<":
                    words.append(token)
    return out


ALL = [c for doc in DOCS for c in _commands(doc.relative_to(ROOT).as_posix(), doc.read_text())]


def _make_targets() -> set[str]:
    text = "\n".join(p.read_text() for p in [ROOT / "Makefile", *sorted((ROOT / "mk").glob("*.mk"))])
    return set(re.findall(r"^([A-Za-z0-9_.-]+):(?!=)", text, re.M))


def _node_program(name: str) -> bool:
    return any(p.name == name for p in NODE_BIN.rglob(name))


def _problem(cmd: Command) -> str | None:  # noqa: C901 - one rule per kind of command, read top to bottom
    first, args = cmd.words[0], cmd.words[1:]
    if first in ("python", "python3"):
        if args[:2] == ("-m", "venv") or (args and args[0].startswith("/opt/gpu-cluster/")):
            return None
        return "bare python: spell it venv/bin/python (one interpreter spelling)"
    if first == "venv/bin/python":
        if args[:1] == ("-m",):
            module = args[1]
            return None if module in ("pip", "venv") or importlib.util.find_spec(module) else f"no module {module}"
        if args and args[0].endswith(".py"):
            return None if (ROOT / args[0]).is_file() else f"no file {args[0]}"
        return None
    if first.startswith("venv/bin/"):
        return None if (Path(sys.executable).parent / first.split("/")[-1]).exists() else f"{first} is not in venv/"
    if first == "make":
        targets = [a for a in args if not a.startswith("-") and "=" not in a]
        missing = sorted(set(targets) - _make_targets())
        return f"no make target {', '.join(missing)}" if missing else None
    if first in BUILTINS or first in PREREQUISITES or first in NODE_TOOLS:
        return None
    if first.startswith("gpu-cluster-"):
        if first in ("gpu-cluster-ops", "gpu-cluster-plan", "gpu-cluster-verdict") or _node_program(first):
            return None
        return f"{first} is neither a console script nor a program the nodes get"
    if "/" in first:
        return None if (ROOT / first).exists() or first.startswith("/opt/gpu-cluster/") else f"no file {first}"
    return None if shutil.which(first) else f"{first}: no such command on this machine"


def _file_problems(cmd: Command, created: set[str]) -> list[str]:
    """Repository files a command names (paths under a top-level entry, or file:// ones)."""
    problems = []
    for word in cmd.words[1:]:
        path = word.removeprefix("file://")
        if path in created or any(c in path for c in "<>{}*$"):
            continue
        head = path.split("/")[0]
        local = word.startswith("file://") and not path.startswith("/")
        if (local or ("/" in path and head in TOP)) and not (ROOT / path).exists():
            problems.append(f"names {path}, which is not in the repository")
    return problems


def test_the_docs_have_shell_blocks():
    assert len(ALL) > 60
    assert {c.doc for c in ALL} >= {"README.md", "CONTRIBUTING.md", "docs/capacity-blocks.md"}


@pytest.mark.parametrize("doc", [d.relative_to(ROOT).as_posix() for d in DOCS])
def test_every_command_exists(doc):
    problems = [f"{c}: {why}" for c in ALL if c.doc == doc and (why := _problem(c))]
    assert problems == []


@pytest.mark.parametrize("doc", [d.relative_to(ROOT).as_posix() for d in DOCS])
def test_every_file_named_exists(doc):
    created: set[str] = set()
    problems = []
    for c in (c for c in ALL if c.doc == doc):
        problems += [f"{c}: {why}" for why in _file_problems(c, created)]
        created.update(c.writes)
        if c.words[0] == "cp" and len(c.words) == 3:
            created.add(c.words[2])
    assert problems == []


def test_the_checker_finds_what_it_should():
    def check(line: str) -> list[str | None]:
        return [_problem(c) for c in _commands("probe", f"```bash\n{line}\n```\n")]

    assert check("make no-such-target") == ["no make target no-such-target"]
    assert check("python3 -m ops status") == ["bare python: spell it venv/bin/python (one interpreter spelling)"]
    assert check("venv/bin/python -m no_such_module") == ["no module no_such_module"]
    assert check("frobnicate --all") == ["frobnicate: no such command on this machine"]
    assert check("gpu-cluster-nope") == ["gpu-cluster-nope is neither a console script nor a program the nodes get"]
    assert check("make check && venv/bin/python -m ops --help | head  # a comment") == [None, None, None]
    assert check("X=1 sbatch -N 2 \\\n  /fsx/jobs/nccl-host.sbatch") == [None]
    assert _file_problems(Command("x", 1, ("aws", "--x", "file://docs/no-such.json")), set()) == [
        "names docs/no-such.json, which is not in the repository"
    ]
    # The README once named a trust.json that did not exist; one written first is fine.
    assert _file_problems(Command("x", 1, ("aws", "--doc", "file://trust.json")), set()) == [
        "names trust.json, which is not in the repository"
    ]
    [write, use] = _commands("probe", "```bash\ncat > trust.json <<EOF\n{}\nEOF\naws x file://trust.json\n```\n")
    assert write.writes == ("trust.json",) and _file_problems(use, set(write.writes)) == []


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("doc", [d.relative_to(ROOT).as_posix() for d in DOCS])
def test_every_relative_link_resolves(doc):
    text = (ROOT / doc).read_text()
    targets = [t for t in LINK.findall(text) if "://" not in t and not t.startswith("mailto:")]
    assert [t for t in targets if not ((ROOT / doc).parent / t).exists()] == []
