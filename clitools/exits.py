"""The exit-code table of every gpu-cluster CLI: its one home (docs/cli.md shows it).

The node-side programs (nodeside/*.py) cannot import this package: they run on the
nodes as single files with the system Python, one of them fed to `python3 -` over SSM.
Each carries a copy of the five numbers; tests/repo/test_exit_codes.py keeps every
copy equal to this table.
"""

from __future__ import annotations

OK = 0
# A check ran and found a failure: NO-GO, drift, a failed boot, a refused image.
FAILED = 1
# Usage or bad input: one line per problem, nothing changed.
USAGE = 2
# Cannot reach or read something: AWS, a file, a node.
UNREACHABLE = 3
# An internal error (a bug): one line; GPU_CLUSTER_DEBUG=1 prints the traceback.
INTERNAL = 4
# Interrupted by Ctrl-C: the shell's own 128 + SIGINT.
INTERRUPTED = 130

DEBUG_ENV = "GPU_CLUSTER_DEBUG"

# (code, name, meaning): the table as docs/cli.md prints it.
TABLE: tuple[tuple[int, str, str], ...] = (
    (OK, "ok", "done; every check passed"),
    (FAILED, "failed", "a check found a failure (NO-GO gate, failed boot, drift, refused image, a failed step)"),
    (USAGE, "usage", "usage or bad input: one line per problem, nothing changed"),
    (UNREACHABLE, "unreachable", "cannot reach or read something: AWS, a file, a node"),
    (INTERNAL, "internal", f"internal error (a bug): one line; {DEBUG_ENV}=1 prints the traceback"),
    (INTERRUPTED, "interrupted", "interrupted (Ctrl-C)"),
)
