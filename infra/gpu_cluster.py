"""The whole cluster as one component another Pulumi Python program can declare.

    from gpu_cluster import GpuCluster
    cluster = GpuCluster("training", config=pulumi.Config().require_object("cluster"),
                         region=pulumi.Config("aws").require("region"))
    pulumi.export("ssm", cluster.outputs["controller_ssm_command"])

`config` is the same object as `gpu-cluster:cluster` in a stack file of this repository
(docs/config-reference.md); it is validated completely before anything is declared,
and bad input fails the preview with every `path: message` at once. The component's
name plays the stack name's part here: `name`'s default and the base of the AWS names
the program fixes (`gpu-cluster-<name>` launch templates and groups), so two clusters
in one program do not collide. Components never read config: the caller passes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulumi

from infra.cluster import build
from infra.component import parented
from model.config import parse_config
from model.config_warnings import config_warnings
from model.errors import ConfigError, one_line

TYPE = "gpu-cluster:index:GpuCluster"


class GpuCluster(pulumi.ComponentResource):
    """Outputs: `outputs`, the same mapping the program exports as stack outputs."""

    outputs: dict[str, Any]

    def __init__(
        self,
        name: str,
        config: Mapping[str, Any],
        region: str,
        *,
        now: datetime | None = None,
        registry_passwords: Mapping[str, pulumi.Output[str]] | None = None,
        base_dir: str | Path | None = None,
        allow_example_values: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`base_dir`: where relative paths in the config (the on-node-ready hook) are read
        from (default: the working directory, the project's, as `pulumi` runs programs).
        `now`: the moment that decides which Capacity Blocks have started (default: the
        clock, read once). `registry_passwords`: the secrets of `containers` entries of kind
        stack, by their short name. `allow_example_values`: offline plans and tests only."""
        try:
            cfg = parse_config(dict(config), stack=name, region=region, base_dir=Path(base_dir or Path.cwd()))
        except ConfigError as err:
            raise pulumi.RunError(str(err)) from None
        super().__init__(TYPE, name, None, opts)
        for path, message in config_warnings(cfg):
            pulumi.log.warn(one_line(f"{path}: {message}"), resource=self)
        with parented(self):
            try:
                result = build(
                    cfg, region, now or datetime.now(UTC), dict(registry_passwords or {}), allow_example_values
                )
            except ConfigError as err:
                raise pulumi.RunError(str(err)) from None
        self.outputs = result.outputs
        self.register_outputs(result.outputs)
