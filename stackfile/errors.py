"""The one error type of stack-file input."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: one line per problem, each naming the file, `--set` or `--out` first."""

    def __init__(self, lines: list[str]):
        self.lines = list(lines)
        super().__init__("\n".join(self.lines))
