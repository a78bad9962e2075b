"""Read `Pulumi.<stack>.yaml` and parse the cluster config (no pulumi import).

The stack file is read by the same strict reader as the offline plan writer
(`stackfile/reader.py`): a duplicate key or a YAML error is refused with its
`FILE:LINE:COL`, as `pulumi preview` refuses it, instead of being read some other way.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.config import ClusterConfig, parse_config
from model.errors import ConfigError
from stackfile.engine import read_config, source_from_env
from stackfile.errors import InputError


@dataclass(frozen=True)
class Stack:
    name: str
    region: str
    config: ClusterConfig


def load_raw(stack: str, root: Path | None = None, source: str | None = None) -> tuple[Any, str | None]:
    """(raw `gpu-cluster:cluster` object, `aws:region`) of the stack in `root` (default:
    the working directory, as `pulumi` looks there), read as the engine assembles it
    (stackfile/engine.py: `pulumi config` where a CLI is present, else the stack file and
    Pulumi.yaml; `source` defaults to GPU_CLUSTER_CONFIG_SOURCE); InputError (one line per
    problem) when the file cannot be read as a stack file. Notes go to stderr."""
    root = Path.cwd() if root is None else root
    cfg = read_config(stack, root, source=source or source_from_env())
    for note in cfg.notes:
        print(f"note: {note}", file=sys.stderr)
    if cfg.problems:
        raise InputError(cfg.problems)
    return cfg.raw, cfg.region


def load_stack(stack: str, region: str | None = None, root: Path | None = None) -> Stack:
    """Parsed stack; ConfigError (every `path: message`) when the config is bad."""
    root = Path.cwd() if root is None else root
    raw, file_region = load_raw(stack, root)
    region = region or file_region
    # The stack name is `name`'s default and what the program's AWS names derive from;
    # a hook path is relative to the stack files.
    cfg = parse_config(raw, stack=stack, region=region or None, base_dir=root)
    if not region:
        raise ConfigError([("aws:region", "not set; add `aws:region: <region>` to the stack file or pass --region")])
    return Stack(stack, region, cfg)
