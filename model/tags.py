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
ROLE = "GpuClusterRole"  # `controller` or `worker`
NODES = "GpuClusterNodes"  # expected node count of the whole cluster
BLOCK = "GpuClusterBlock"  # capacity block name, or ON_DEMAND

ON_DEMAND = "on-demand"
ROLES = ("controller", "worker")

# Every tag the boot reads from instance metadata, in the order step 10 reads them.
NODE_IDENTITY = (CLUSTER, ROLE, NODES, BLOCK)


def identity_tags(cluster: str, role: str, nodes: int, block: str) -> dict[str, str]:
    """The identity tags of one instance (values are strings, as EC2 stores them)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    return {CLUSTER: cluster, ROLE: role, NODES: str(nodes), BLOCK: block}
