"""The one error type of stack-file input."""

from __future__ import annotations

from clitools.errors import UsageError


class InputError(UsageError):
    """Bad input: one line per problem, each naming the file, `--set` or `--out` first.

    Exit 2 (bad input) by the CLIs' table (clitools/exits.py), 3 when the file could not
    be read at all (`code=exits.UNREACHABLE`)."""
