"""Shell completion, generated from the CLI's own argparse parser.

Why not argcomplete: it runs the program on every Tab press (our CLIs import boto3 and
pydantic: most of a second each time) and adds a dependency. This script is written
once from the same parser the program parses with (so it cannot drift from the real
options: tests/clitools/test_completion.py runs it in bash), and answers at once.
bash reads it directly; zsh after `autoload -U +X bashcompinit && bashcompinit`.

    source <(gpu-cluster-ops completion bash)
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

# Options whose values are stack names: completed from Pulumi.<stack>.yaml in the working directory.
STACK_OPTIONS = ("--stack",)
_STACKS = "$(compgen -G 'Pulumi.*.yaml' | sed -e 's/^Pulumi\\.//' -e 's/\\.yaml$//')"


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _value_words(action: argparse.Action) -> str | None:
    """The compgen arguments that complete this option's value, None for no value."""
    if action.nargs == 0:
        return None
    if action.choices:
        return "-W " + shlex.quote(" ".join(str(c) for c in action.choices))
    if any(o in STACK_OPTIONS for o in action.option_strings):
        return f'-W "{_STACKS}"'
    meta = str(action.metavar or action.dest).upper()
    if action.type is Path or meta in ("FILE", "LOG", "DIR", "PATH"):
        return "-d" if "DIR" in meta else "-f"
    return ""  # a free value: nothing to offer, but the next word is a value


def _words(p: argparse.ArgumentParser) -> list[str]:
    opts = [o for a in p._actions for o in a.option_strings if a.help != argparse.SUPPRESS]
    return sorted(opts) + sorted(_subparsers(p))


def _value_cases(cmd: str, p: argparse.ArgumentParser) -> list[str]:
    out = []
    for action in p._actions:
        words = _value_words(action)
        if words is None or not action.option_strings:
            continue
        pattern = "|".join(f'"{cmd}:{o}"' for o in action.option_strings)
        reply = f'COMPREPLY=($(compgen {words} -- "$cur"))' if words else "COMPREPLY=()"
        out.append(f"    {pattern}) {reply}; return ;;")
    return out


def bash(prog: str, parser: argparse.ArgumentParser) -> str:
    """A bash completion script for `prog` (the command name typed at the prompt)."""
    fn = "_" + re.sub(r"\W", "_", prog)
    subs = _subparsers(parser)
    cases = _value_cases("", parser)
    for name, sp in sorted(subs.items()):
        cases += _value_cases(name, sp)
    commands = "|".join(sorted(subs)) or "__none__"
    lines = [
        f"# bash completion for {prog} (generated from its parser: {prog} completion bash)",
        f"{fn}() {{",
        '  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd="" i',
        "  for ((i = 1; i < COMP_CWORD; i++)); do",
        f"    case ${{COMP_WORDS[i]}} in {commands}) cmd=${{COMP_WORDS[i]}}; break ;; esac",
        "  done",
        '  case "$cmd:$prev" in',
        *cases,
        "  esac",
        '  case "$cmd" in',
        f'    "") COMPREPLY=($(compgen -W {shlex.quote(" ".join(_words(parser)))} -- "$cur")) ;;',
    ]
    for name, sp in sorted(subs.items()):
        lines.append(f'    {name}) COMPREPLY=($(compgen -W {shlex.quote(" ".join(_words(sp)))} -- "$cur")) ;;')
    lines += ["  esac", "}", f"complete -F {fn} {prog}", ""]
    return "\n".join(lines)
