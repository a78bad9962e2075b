"""What every command gets: AWS clients, output streams, a clock and a prompt.

All four are replaceable so tests run commands in-process with stubbed clients, a
fake clock (waits finish instantly but their bounds are real) and scripted answers.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

from ops.aws import Session


class Clock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass
class Context:
    session: Session
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    clock: Clock = field(default_factory=Clock)
    prompt: Callable[[str], str] = input
    interactive: bool = field(default_factory=lambda: sys.stdin.isatty())

    def progress(self, message: str) -> None:
        """Progress of long waits goes to stderr, so `--json` stdout stays parseable."""
        print(message, file=self.err, flush=True)

    def print(self, text: str = "") -> None:
        print(text, file=self.out)
