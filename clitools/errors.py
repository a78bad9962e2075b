"""Errors a CLI turns into its exit code and one line per problem (clitools/exits.py)."""

from __future__ import annotations

from clitools import exits


class CliError(Exception):
    """One or more lines to print on stderr, and the exit code they mean."""

    code = exits.FAILED

    def __init__(self, lines: str | list[str], code: int | None = None):
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        if code is not None:
            self.code = code
        super().__init__("\n".join(self.lines))


class UsageError(CliError):
    """Bad input (an argument, a file's shape): exit 2."""

    code = exits.USAGE


class Unreadable(CliError):
    """Something could not be reached or read (AWS, a file, a node): exit 3."""

    code = exits.UNREACHABLE


class CheckFailed(CliError):
    """A check ran and found a failure: exit 1."""

    code = exits.FAILED
