"""INTERIM placeholder for the node renderer (docs/node-contract.md, "Renderer API").

Written by the infra engineer only so the Pulumi program can be wired and tested before
the real renderer lands; the userdata engineer replaces this file wholesale. It returns
deterministic placeholder bytes that depend only on the inputs the contract names.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FsxEndpoint:
    dns_name: str
    mount_name: str


@dataclass(frozen=True)
class NodeFiles:
    user_data: bytes
    files: dict[str, bytes] = field(default_factory=dict)
    s3_payload: tuple[str, bytes] | None = None


def render_userdata(cfg, spec, fsx: FsxEndpoint) -> NodeFiles:
    env = (
        "# placeholder cluster.env (interim renderer)\n"
        f"CLUSTER_NAME='{cfg.name}'\n"
        f"INSTANCE_TYPE='{spec.name}'\n"
        f"FSX_DNS_NAME='{fsx.dns_name}'\n"
        f"FSX_MOUNT_NAME='{fsx.mount_name}'\n"
        f"SLURM_PARTITION='{cfg.slurm.partition}'\n"
    ).encode()
    script = b"#!/usr/bin/env bash\n# placeholder user data (interim renderer)\nset -euo pipefail\n"
    files = {"/etc/gpu-cluster/cluster.env": env}
    return NodeFiles(user_data=gzip.compress(script + env, mtime=0), files=files)
