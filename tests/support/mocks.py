"""Shared helpers: run components or the whole program under the plan's mocks.

The mocks are `offline.mocks.PlanMocks` (deterministic ids, FSx dns/mount name, launch
template latest_version 1), so tests see exactly what `python -m offline.plan` writes.
Each call re-installs the mocks (the mock runtime state is process-global [P-SDK]).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from offline.mocks import PLAN_NOW, PlanMocks, run_under_mocks, run_with_mocks
from offline.plan import load_stack_config

REGION = "us-east-2"


@dataclass
class Run:
    resources: list[dict[str, Any]]
    urns: dict[str, str]
    value: Any = None
    node_files: Any = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    def custom(self) -> list[tuple[str, str]]:
        """(type, name) of every cloud resource, sorted."""
        return sorted((r["type"], r["name"]) for r in self.resources if r["custom"])

    def of_type(self, typ: str) -> list[dict[str, Any]]:
        return sorted((r for r in self.resources if r["type"] == typ), key=lambda r: r["name"])

    def inputs(self, typ: str, name: str) -> dict[str, Any]:
        matches = [r for r in self.resources if r["type"] == typ and r["name"] == name]
        assert len(matches) == 1, f"{typ} {name}: {len(matches)} found; have {self.custom()}"
        return matches[0]["inputs"]

    def parent_type(self, typ: str, name: str) -> str:
        """Type token of the resource's parent, read from its URN."""
        qualified = self.urns[f"{name}|{typ}"].split("::")[2]
        return qualified.split("$")[-2]


def run_component(factory: Callable[[], Any], region: str = REGION, subnet_az: str | None = None) -> Run:
    """Declare what `factory` declares; resolve what it returns."""
    mocks = PlanMocks(region, subnet_az=subnet_az)
    value, urns = run_with_mocks(factory, mocks, config={"aws:region": region})
    return Run(mocks.resources, urns, value, calls=mocks.calls)


def run_program(
    raw: dict[str, Any],
    region: str = REGION,
    subnet_az: str | None = None,
    mocks: PlanMocks | None = None,
    now: datetime = PLAN_NOW,
) -> Run:
    mocks, urns, outputs, node_files = run_under_mocks(raw, region, subnet_az=subnet_az, mocks=mocks, now=now)
    return Run(mocks.resources, urns, outputs, node_files, calls=mocks.calls)


def stack_config(stack: str) -> tuple[dict[str, Any], str]:
    raw, region = load_stack_config(stack)
    return copy.deepcopy(raw), region


def valid_raw() -> dict[str, Any]:
    """A small valid cluster config (dev-like, existing subnet, a block that starts after
    offline.mocks.PLAN_NOW, a pinned image) for mutation in tests."""
    return {
        "name": "t1",
        "instance_type": "p5.48xlarge",
        "network": {"availability_zone": "us-east-2b", "subnet_id": "subnet-0a1b2c3d4e5f60718"},
        "capacity": {
            "nodes": 2,
            "capacity_blocks": [
                {
                    "name": "a",
                    "reservation_id": "cr-0123456789abcdef0",
                    "instance_count": 2,
                    "availability_zone": "us-east-2b",
                    "start": "2026-12-01T11:30:00Z",
                    "end": "2026-12-08T11:30:00Z",
                }
            ],
        },
        "image": {"ami_id": "ami-0a1b2c3d4e5f60718"},
        "tags": {"team": "ml"},
    }
