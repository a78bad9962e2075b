"""Stand-ins for sections that failed their shape checks, so meaning errors of the others
still show: a typo in one section does not hide a wrong node count in another.

parse_config (model/config.py) validates `stand_in(...)` and keeps what `beside(...)`
lets through.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from model.catalog import SUPPORTED_INSTANCE_TYPES
from model.paths import section_of

# Valid stand-ins for sections that failed shape validation (or are missing).
STAND_INS: dict[str, Any] = {
    "name": "stand-in",
    "instance_type": SUPPORTED_INSTANCE_TYPES[0],
    "network": {"availability_zone": "us-east-1a"},
    "capacity": {"nodes": 2},
}


def stand_in(raw: dict, shape: list[tuple[str, str]], keys: Iterable[str]) -> dict[str, Any]:
    """`raw` with every section that has shape errors dropped, or replaced by its stand-in."""
    bad = {section_of(path) for path, _ in shape}
    out = {}
    for key in keys:
        if key in raw and key not in bad:
            out[key] = raw[key]
        elif key in STAND_INS:
            out[key] = STAND_INS[key]
    return out


def beside(problems: list[tuple[str, str]], raw: dict, shape: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The meaning errors found on the stand-in that depend only on well-formed sections
    the user wrote (block AZs need a well-formed network)."""
    bad = {section_of(path) for path, _ in shape}
    reported = {path for path, _ in shape}
    kept = []
    for path, message in problems:
        section = section_of(path)
        if section in bad or section not in raw or path in reported:
            continue
        if "network" in bad and path.endswith(".availability_zone"):
            continue
        kept.append((path, message))
    return kept
