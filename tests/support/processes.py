"""The host's process table as tests read it: each process's pid and argument vector.

Tests find what a run left behind (a slurmstepd, a node's responder, a gpg-agent) by its
command line; a process can end between listing /proc and reading it, so it is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def command_lines() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, argv) for every process but this one; argv is empty for a kernel thread."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:  # the process ended while we looked
            continue
        yield int(entry), raw.rstrip(b"\0").split(b"\0") if raw else []
