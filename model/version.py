"""The one home of gpu-cluster's version.

`pyproject.toml` reads `VERSION` (setuptools `dynamic`, read from this file's text, not by
importing it), every CLI's `--version` prints `version_line(prog)`, the policy pack's
`PulumiPolicy.yaml` and the newest CHANGELOG.md entry carry the same string
(tests/repo/test_version.py keeps them equal). Releases are git tags `v<VERSION>`.
Stdlib only and imports nothing of ours, so any CLI can import it before its own
dependencies load.
"""

from __future__ import annotations

VERSION = "0.1.0"
PROJECT = "gpu-cluster"


def version_line(program: str) -> str:
    """What `PROGRAM --version` prints: `gpu-cluster-ops (gpu-cluster) 0.1.0`."""
    if program == PROJECT:
        return f"{PROJECT} {VERSION}"
    return f"{program} ({PROJECT}) {VERSION}"
