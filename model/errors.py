"""The one error the config raises: every problem at once, one `path: message` per line."""

from __future__ import annotations

import re

# C0 controls and DEL (and the line/paragraph separators that split lines too).
_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


def one_line(text: str) -> str:
    """`text` with control characters and line separators escaped (`\\n`, `\\x00`)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class ConfigError(Exception):
    """All problems found in the stack config, one `path: message` per line.

    A value echoed in a path or message (a newline in a tag, a NUL) must not break the
    line or the terminal of whoever prints the error, so each line is escaped here.
    """

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("\n".join(one_line(f"{p}: {m}") for p, m in problems))
