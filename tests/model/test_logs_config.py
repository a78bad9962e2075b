"""`logs`: defaults, and every refusal with its path and fix (model/logs.py)."""

from __future__ import annotations

import pytest

from model.config import parse_config
from model.errors import ConfigError
from tests.support.mocks import valid_raw

ROOT = "gpu-cluster:cluster"
KEY = "arn:aws:kms:{region}:123456789012:key/0b1e2f3a-4c5d-6e7f-8091-a2b3c4d5e6f7"


def _problems(**logs) -> list[str]:
    raw = valid_raw()
    raw["logs"] = logs
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    return [f"{p}: {m}" for p, m in err.value.problems]


def test_on_by_default_for_a_month_with_cloudwatch_logs_own_encryption():
    cfg = parse_config(valid_raw())
    assert (cfg.logs.enabled, cfg.logs.retention_days, cfg.logs.kms_key_arn) == (True, 30, None)
    raw = valid_raw()
    raw["logs"] = {"retention_days": 3653, "kms_key_arn": KEY.format(region="us-east-2")}
    assert parse_config(raw).logs.retention_days == 3653


def test_a_retention_cloudwatch_does_not_offer_names_the_nearest():
    (problem,) = _problems(retention_days=31)
    assert problem.startswith(
        f"{ROOT}.logs.retention_days: 31 is not a CloudWatch Logs retention period; use one of 1, 3, 5"
    )
    assert problem.endswith("(nearest: 30)")


def test_a_key_that_is_not_a_kms_key_arn_or_of_another_region_is_refused():
    (problem,) = _problems(kms_key_arn="alias/logs")
    assert problem.startswith(f"{ROOT}.logs.kms_key_arn: 'alias/logs' is not a KMS key ARN; use arn:aws:kms:")
    (problem,) = _problems(kms_key_arn=KEY.format(region="eu-west-1"))
    assert problem == (
        f"{ROOT}.logs.kms_key_arn: the key is in eu-west-1, the stack in us-east-2; "
        "CloudWatch Logs needs a key of the log group's region"
    )
    raw = valid_raw()
    raw["logs"] = {"enabled": False, "kms_key_arn": KEY.format(region="eu-west-1")}
    assert parse_config(raw).logs.enabled is False  # an unused key is not checked against the region
