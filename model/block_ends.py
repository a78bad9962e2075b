"""The block ends the program publishes for running nodes (issue 17, decision D3).

A Capacity Block can be extended: same reservation id, a later EndDate [CB-EXTEND]. The
program then declares the new end in the GpuClusterBlockEnd tag of the group, but Auto
Scaling tag changes never reach instances that are already running [ASG-TAGS]: every
node of the block would keep draining and reserving itself at the old end, and paid
capacity would idle. So the program also writes each declared block's current end (and
reservation id) into one small JSON object beside the node payload, under a fixed key,
updated in place by `pulumi up`; the controller's agent loop reads it (at most every
BLOCK_ENDS_INTERVAL seconds, nodeside/lib/block-end.sh block_end_fetch) and moves the
block's reservation and drain to the published end.

The document is byte-stable (sorted keys, fixed indent, one trailing newline) so the
same config never changes the object, and holds only what the node checks: a format
version, the cluster name, and per block its end (UTC, the one spelling of
model.capacity.iso_utc) and reservation id.
"""

from __future__ import annotations

import json

from model.capacity import iso_utc
from model.config import ClusterConfig

# Fixed, so every `pulumi up` updates the same object (never a new name the nodes do
# not know), and outside `payload/`, whose objects are content-addressed.
BLOCK_ENDS_KEY = "blocks/ends.json"
# Bumped only with a change the node-side reader (block_end_fetch) must refuse to read
# as the old format.
BLOCK_ENDS_FORMAT = 1


def block_ends_uri(bucket_name: str) -> str:
    """Where the nodes read the document (cluster.env BLOCK_ENDS_URI)."""
    return f"s3://{bucket_name}/{BLOCK_ENDS_KEY}"


def block_ends_document(cfg: ClusterConfig) -> str:
    """The object's content: every declared block with both dates (deploy_problems refuses
    a deploy without them, so a block without an end is never published as "no end")."""
    blocks = {
        b.name: {"end": iso_utc(b.end), "reservation_id": b.reservation_id}
        for b in cfg.capacity.capacity_blocks
        if b.end is not None
    }
    doc = {"format": BLOCK_ENDS_FORMAT, "cluster": cfg.name, "blocks": blocks}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
