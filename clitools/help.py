"""`--help` that says what a command does, shows an example and every default.

Each subcommand is added through `command()`: its one-line summary is the line in the
parent's list and the first line of its own help, its example closes its help, and
the formatter appends `(default: X)` to every option whose default means something
(not None, not False) unless its help already names the default.
"""

from __future__ import annotations

import argparse
from typing import Any

from model.version import version_line


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written (examples keep their lines); defaults shown."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            text
            and "default" not in text
            and not (default is None or default is False or default is argparse.SUPPRESS or default == [])
            and (action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE))
        ):
            text += " (default: %(default)s)"
        return text


def examples(*lines: str) -> str:
    return "example" + ("s" if len(lines) > 1 else "") + ":\n" + "\n".join(f"  {line}" for line in lines)


def parser(prog: str, summary: str, *example: str, **kw: Any) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description=summary, epilog=examples(*example) if example else None, formatter_class=Formatter, **kw
    )
    add_version(p, prog)
    return p


def add_version(p: argparse.ArgumentParser, prog: str) -> None:
    p.add_argument("--version", action="version", version=version_line(prog), help="print the version and exit")


def command(sub: Any, name: str, summary: str, *example: str, **kw: Any) -> argparse.ArgumentParser:
    """A subcommand with its one-line summary and example(s)."""
    return sub.add_parser(  # type: ignore[no-any-return]
        name, help=summary, description=summary, epilog=examples(*example), formatter_class=Formatter, **kw
    )
