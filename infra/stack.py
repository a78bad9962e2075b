"""`pulumi up` entry: read `gpu-cluster:cluster`, validate it, build, export outputs."""

from __future__ import annotations

from datetime import UTC, datetime

import pulumi

from model.config import CONFIG_KEY, CONFIG_NAMESPACE, ClusterConfig, ConfigError, parse_config


def load_config() -> ClusterConfig:
    raw = pulumi.Config(CONFIG_NAMESPACE).get_object(CONFIG_KEY)
    try:
        return parse_config(raw)
    except ConfigError as err:
        raise pulumi.RunError(str(err)) from None


def aws_region() -> str:
    region = pulumi.Config("aws").get("region")
    if not region:
        raise pulumi.RunError("aws:region: required; set it with `pulumi config set aws:region us-east-2`")
    return region


def run(now: datetime | None = None, allow_example_values: bool = False):
    """Build the stack from config; config and preflight errors become RunError lines.

    The clock is read here, once: which Capacity Blocks have started decides group
    sizes and scheduled actions. `infra/plan.py` and the tests pass a fixed `now`, and
    `allow_example_values` (plans render the shipped stack files as they are).
    """
    from infra.cluster import build

    cfg = load_config()
    if now is None:
        now = datetime.now(UTC)
    try:
        return build(cfg, aws_region(), now, allow_example_values)
    except ConfigError as err:
        raise pulumi.RunError(str(err)) from None


def main(now: datetime | None = None) -> None:
    result = run(now)
    for key, value in result.outputs.items():
        pulumi.export(key, value)
