"""The common base of the program's Pulumi components.

Each component declares its own type token (`TYPE`), args, child resources and
outputs; the base only registers the component under that token and gives the
options every child resource takes, so the children nest under it in the
Pulumi resource tree (and in `pulumi preview`). Components still call
`register_outputs` last, once their outputs exist.
"""

from __future__ import annotations

from typing import ClassVar

import pulumi


class Component(pulumi.ComponentResource):
    TYPE: ClassVar[str]  # the Pulumi type token, "gpu-cluster:index:<Name>"

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)

    @property
    def child(self) -> pulumi.ResourceOptions:
        """Options for a child resource: parented to this component."""
        return pulumi.ResourceOptions(parent=self)
