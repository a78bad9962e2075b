"""The common base of the program's Pulumi components.

Each component declares its own type token (`TYPE`), args, child resources and
outputs; the base only registers the component under that token and gives the
options every child resource takes, so the children nest under it in the
Pulumi resource tree (and in `pulumi preview`). Components still call
`register_outputs` last, once their outputs exist.

Inside another program, the whole cluster is one `GpuCluster` (infra/gpu_cluster.py):
while it declares the cluster, every component that names no parent of its own is
parented to it (`parented`), so `pulumi preview` shows the cluster as one tree. The
program of this repository declares no GpuCluster, so its URNs are what they were.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import ClassVar

import pulumi

_PARENT: contextvars.ContextVar[pulumi.Resource | None] = contextvars.ContextVar("gpu_cluster_parent", default=None)


@contextlib.contextmanager
def parented(parent: pulumi.Resource) -> Iterator[None]:
    """Components constructed inside this block (synchronously: none is created in an
    `apply`) default to `parent` as their parent."""
    token = _PARENT.set(parent)
    try:
        yield
    finally:
        _PARENT.reset(token)


class Component(pulumi.ComponentResource):
    TYPE: ClassVar[str]  # the Pulumi type token, "gpu-cluster:index:<Name>"

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        parent = _PARENT.get()
        if parent is not None and (opts is None or opts.parent is None):
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(parent=parent))
        super().__init__(self.TYPE, name, None, opts)

    @property
    def child(self) -> pulumi.ResourceOptions:
        """Options for a child resource: parented to this component."""
        return pulumi.ResourceOptions(parent=self)
