#!/usr/bin/env python3
"""Writes nodeside/conf/aws-requirements.txt: the boto3 the nodes install (step 20), with
exactly the versions and hashes of requirements.txt, so the controller's agents run the
botocore whose service models the tests' Stubber checks requests against. `make lock`
runs it; tests/nodeside/test_aws_client.py fails when the two differ.

Usage: python3 scripts/aws-requirements.py [--check]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
LOCK = TOP / "requirements.txt"
OUT = TOP / "nodeside" / "conf" / "aws-requirements.txt"
# boto3 and what it needs at run time (pip-compile's "via" lines name the same set).
PACKAGES = ("boto3", "botocore", "jmespath", "python-dateutil", "s3transfer", "six", "urllib3")
HEADER = """\
# Generated from requirements.txt by scripts/aws-requirements.py (`make lock`); do not edit.
# boto3 for the controller's agents: step 20 installs exactly these, hash-checked
# (pip --require-hashes), into its own virtualenv (GPU_CLUSTER_AWS_PYTHON).
"""


def entries(lock_text: str) -> dict[str, str]:
    """name -> its `name==version \\` line and hash lines, from a pip-compile lock."""
    out: dict[str, str] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", lock_text):
        head = block.split("==", 1)[0].strip().lower()
        if head in PACKAGES:
            lines = [ln.rstrip() for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]
            out[head] = "\n".join(lines).rstrip(" \\")
    return out


def render(lock_text: str) -> str:
    found = entries(lock_text)
    missing = [p for p in PACKAGES if p not in found]
    if missing:
        raise SystemExit(f"aws-requirements: {', '.join(missing)} not in requirements.txt")
    return HEADER + "\n".join(found[p] for p in PACKAGES) + "\n"


def main(argv: list[str]) -> int:
    want = render(LOCK.read_text())
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != want:
            print(
                f"{OUT.relative_to(TOP)} differs from requirements.txt: run `make lock` (or {__file__})",
                file=sys.stderr,
            )
            return 1
        return 0
    OUT.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
