"""Where a config problem is: the stack-file key of `gpu-cluster:cluster` and its paths.

Every problem is `(path, message)` with a path such as
`gpu-cluster:cluster.capacity.capacity_blocks[1].end`, built by `loc_to_path`.
"""

from __future__ import annotations

from typing import Any

CONFIG_NAMESPACE = "gpu-cluster"
CONFIG_KEY = "cluster"
ROOT = f"{CONFIG_NAMESPACE}:{CONFIG_KEY}"
# Pulumi's provider setting, beside the cluster object: the model never reads it, callers
# that know it pass it to parse_config(region=...).
REGION_PATH = "aws:region"


def loc_to_path(loc: tuple[Any, ...]) -> str:
    path = ROOT
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def section_of(path: str) -> str:
    """Top-level key a problem path belongs to ('' for the root itself)."""
    return path.removeprefix(ROOT).lstrip(".").split(".")[0].split("[")[0]
