"""What every section model shares: strict frozen models and how a refused value is shown."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from model import aws_rules


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


def aws_id(prefix: str, value: str, what: str, hint: str) -> str:
    """`value` if it is an EC2 resource id `<prefix>-<8 to 17 hex digits>`, else the error with the fix."""
    if not aws_rules.is_resource_id(prefix, value):
        raise ValueError(f"'{value}' is not {what}; {hint}")
    return value


def got(value: Any) -> str:
    """The offending value as the stack file spells it (null, true, NaN), shortened."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
