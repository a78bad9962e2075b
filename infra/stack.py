"""`pulumi up` entry: read `gpu-cluster:cluster`, validate it, build, export outputs."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pulumi

from model.config import ClusterConfig, parse_config
from model.config_warnings import config_warnings
from model.errors import ConfigError, one_line
from model.paths import CONFIG_KEY, CONFIG_NAMESPACE, ROOT
from model.registries import stack_secret_key

# Where Pulumi.yaml and the stack files are: relative paths in the config (the
# on-node-ready hook) are read from here, wherever the program is run from.
PROJECT_DIR = Path(__file__).resolve().parent.parent


def refusal(err: ConfigError) -> pulumi.RunError:
    """One line per problem, control characters escaped (ConfigError does that itself)."""
    return pulumi.RunError(str(err))


def load_config() -> ClusterConfig:
    """The parsed config of this stack: `name` defaults to the stack name, the AZs are
    checked against `aws:region` (when set), and accepted-but-odd settings are logged
    as warnings (`pulumi preview` shows them)."""
    try:
        raw = pulumi.Config(CONFIG_NAMESPACE).get_object(CONFIG_KEY)
    except pulumi.ConfigTypeError:
        # Pulumi's own message quotes the value, which may be a decrypted secret.
        raise pulumi.RunError(
            f"{ROOT}: not a JSON object; set keys with `pulumi config set --path 'cluster.<key>' <value>` "
            "or write the object under config: in Pulumi.<stack>.yaml"
        ) from None
    region = pulumi.Config("aws").get("region")
    try:
        cfg = parse_config(raw, stack=pulumi.get_stack(), region=region or None, base_dir=PROJECT_DIR)
    except ConfigError as err:
        raise refusal(err) from None
    for path, message in config_warnings(cfg):
        pulumi.log.warn(one_line(f"{path}: {message}"))
    return cfg


def registry_passwords(cfg: ClusterConfig) -> dict[str, pulumi.Output[str]]:
    """`containers.registry_credentials` of kind stack: each named Pulumi secret, which must
    exist and be stored encrypted (`pulumi config set --secret`), never in plain text."""
    conf = pulumi.Config(CONFIG_NAMESPACE)
    out: dict[str, pulumi.Output[str]] = {}
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, c in enumerate(cfg.containers.registry_credentials):
        if c.kind != "stack" or c.secret in seen:
            continue
        seen.add(c.secret)
        key = stack_secret_key(c.secret)
        full = f"{CONFIG_NAMESPACE}:{key}"
        path = f"{CONFIG_NAMESPACE}:{CONFIG_KEY}.containers.registry_credentials[{i}].secret"
        value = conf.get_secret(key)
        if value is None:
            problems.append(
                (path, f"{full} is not set; run `pulumi config set --secret {full}` (it asks for the password)")
            )
        elif not pulumi.runtime.is_config_secret(full):
            problems.append(
                (
                    path,
                    f"{full} is stored in plain text in the stack file; remove it and set it again with `pulumi config set --secret {full}`",
                )
            )
        else:
            out[c.secret] = value
    if problems:
        raise ConfigError(problems)
    return out


def aws_region() -> str:
    region = pulumi.Config("aws").get("region")
    if not region:
        raise pulumi.RunError("aws:region: required; set it with `pulumi config set aws:region us-east-2`")
    return region


def run(now: datetime | None = None, allow_example_values: bool = False):
    """Build the stack from config; config and preflight errors become RunError lines.

    The clock is read here, once: which Capacity Blocks have started decides group
    sizes and scheduled actions. `offline/plan.py` and the tests pass a fixed `now`, and
    `allow_example_values` (plans render the shipped stack files as they are).
    """
    from infra.cluster import build

    cfg = load_config()
    if now is None:
        now = datetime.now(UTC)
    try:
        return build(cfg, aws_region(), now, registry_passwords(cfg), allow_example_values)
    except ConfigError as err:
        raise refusal(err) from None


def main(now: datetime | None = None) -> None:
    result = run(now)
    for key, value in result.outputs.items():
        pulumi.export(key, value)
