"""Instance tag names: the node contract between the program, the nodes and the local cluster.

The Auto Scaling groups propagate these tags to every instance they launch
(infra/nodes.py); the launch template enables tags in instance metadata, and step
10-identity reads them from IMDSv2 (`/latest/meta-data/tags/instance/<key>`); the local
cluster's metadata stand-in serves the same keys. EC2 refuses a launch whose
metadata-visible tag keys hold spaces or `/` [EC2-IMDS-TAGS], so every key here is
plain CamelCase.
"""

from __future__ import annotations

CLUSTER = "GpuClusterName"  # cluster name
ROLE = "GpuClusterRole"  # `controller`, `worker` or `login`
NODES = "GpuClusterNodes"  # expected node count of the whole cluster
BLOCK = "GpuClusterBlock"  # capacity block name, or ON_DEMAND
# The block's end, ISO-8601 UTC (2026-12-08T11:30:00Z); Capacity Block nodes only. The
# controller reserves the block's nodes from end minus the margin (lib/block-end.sh).
BLOCK_END = "GpuClusterBlockEnd"

# On the FSx file system, not on instances: the S3 bucket a linked file system relies on
# instead of FSx backups (`s3://<bucket>`), present only when it is linked. The policy
# pack (`fsx-protected`) reads it, since a PERSISTENT_2 links through a separate data
# repository association that a per-resource rule cannot see.
DATA_REPOSITORY = "GpuClusterDataRepository"

ON_DEMAND = "on-demand"
ROLES = ("controller", "worker", "login")

# Every tag the boot reads from instance metadata, in the order step 10 reads them.
NODE_IDENTITY = (CLUSTER, ROLE, NODES, BLOCK)


def identity_tags(cluster: str, role: str, nodes: int, block: str, block_end: str | None = None) -> dict[str, str]:
    """The identity tags of one instance (values are strings, as EC2 stores them).

    `block_end` (ISO-8601 UTC) only for Capacity Block nodes: on-demand nodes get no
    BLOCK_END tag at all.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    tags = {CLUSTER: cluster, ROLE: role, NODES: str(nodes), BLOCK: block}
    if block_end is not None:
        tags[BLOCK_END] = block_end
    return tags
