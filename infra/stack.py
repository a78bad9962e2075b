"""`pulumi up` entry: read `gpu-cluster:cluster`, validate it, build, export outputs."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pulumi

from model import config as model_config
from model.config import CONFIG_KEY, CONFIG_NAMESPACE, ROOT, ClusterConfig, ConfigError, parse_config

# C0 controls and DEL (and the line/paragraph separators that split lines too).
_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


def config_warnings(cfg: ClusterConfig) -> list[tuple[str, str]]:
    """Accepted-but-odd settings, `(path, message)`: printed, never fatal.

    The rules live in `model.config.config_warnings` (issue 11, item 1); until that
    function exists there are none.
    """
    rules = getattr(model_config, "config_warnings", None)
    return list(rules(cfg)) if rules is not None else []


def refusal(err: ConfigError) -> pulumi.RunError:
    """One line per problem: a value echoed in a message (a newline in a tag, a NUL)
    must not break the line or the terminal, so control characters are escaped."""
    return pulumi.RunError("\n".join(one_line(f"{p}: {m}") for p, m in err.problems))


def one_line(text: str) -> str:
    """`text` with control characters and line separators escaped (`\\n`, `\\x00`)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def load_config() -> ClusterConfig:
    try:
        raw = pulumi.Config(CONFIG_NAMESPACE).get_object(CONFIG_KEY)
    except pulumi.ConfigTypeError:
        # Pulumi's own message quotes the value, which may be a decrypted secret.
        raise pulumi.RunError(
            f"{ROOT}: not a JSON object; set keys with `pulumi config set --path 'cluster.<key>' <value>` "
            "or write the object under config: in Pulumi.<stack>.yaml"
        ) from None
    try:
        cfg = parse_config(raw)
    except ConfigError as err:
        raise refusal(err) from None
    for path, message in config_warnings(cfg):
        pulumi.log.warn(f"{path}: {message}")
    return cfg


def aws_region() -> str:
    region = pulumi.Config("aws").get("region")
    if not region:
        raise pulumi.RunError("aws:region: required; set it with `pulumi config set aws:region us-east-2`")
    return region


def run(now: datetime | None = None):
    """Build the stack from config; config and preflight errors become RunError lines.

    The clock is read here, once: which Capacity Blocks have started decides group
    sizes and scheduled actions. `infra/plan.py` and the tests pass a fixed `now`.
    """
    from infra.cluster import build

    cfg = load_config()
    if now is None:
        now = datetime.now(UTC)
    try:
        return build(cfg, aws_region(), now)
    except ConfigError as err:
        raise refusal(err) from None


def main(now: datetime | None = None) -> None:
    result = run(now)
    for key, value in result.outputs.items():
        pulumi.export(key, value)
