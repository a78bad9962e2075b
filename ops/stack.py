"""Read `Pulumi.<stack>.yaml` and parse the cluster config (no pulumi import).

A small loader of its own: the offline renderer's loader lives in infra/, which
imports pulumi, and the operations CLI must start fast and without the Pulumi SDK.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from model.config import ClusterConfig, parse_config
from model.errors import ConfigError
from model.paths import CONFIG_KEY, CONFIG_NAMESPACE
from ops.aws import OpsError

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Stack:
    name: str
    region: str
    config: ClusterConfig


def load_raw(stack: str, root: Path = REPO) -> tuple[Any, str | None]:
    """(raw `gpu-cluster:cluster` object, `aws:region`) of a stack file."""
    path = root / f"Pulumi.{stack}.yaml"
    if not path.exists():
        stacks = ", ".join(sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml")))
        raise OpsError(f"no stack file {path.name} in {root}; stacks: {stacks or 'none'}")
    doc = yaml.safe_load(path.read_text()) or {}
    config = doc.get("config") or {}
    return config.get(f"{CONFIG_NAMESPACE}:{CONFIG_KEY}"), config.get("aws:region")


def load_stack(stack: str, region: str | None = None, root: Path = REPO) -> Stack:
    """Parsed stack; ConfigError (every `path: message`) when the config is bad."""
    raw, file_region = load_raw(stack, root)
    region = region or file_region
    # The stack name is `name`'s default and what the program's AWS names derive from.
    cfg = parse_config(
        raw, stack=stack, region=region or None, base_dir=root
    )  # a hook path is relative to the stack files
    if not region:
        raise ConfigError([("aws:region", "not set; add `aws:region: <region>` to the stack file or pass --region")])
    return Stack(stack, region, cfg)
