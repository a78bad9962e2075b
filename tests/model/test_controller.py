"""controller: placement block (a named host block) or dedicated (its own CPU instance)."""

from __future__ import annotations

import copy

import pytest

from model.config import parse_config
from model.config_warnings import config_warnings
from model.errors import ConfigError
from tests.support.mocks import valid_raw

R = "gpu-cluster:cluster"


def _block(name: str, cr: str, count: int, start: str, end: str) -> dict:
    return {
        "name": name,
        "reservation_id": cr,
        "instance_count": count,
        "availability_zone": "us-east-2b",
        "start": start,
        "end": end,
    }


A = _block("a", "cr-0123456789abcdef0", 4, "2026-12-01T11:30:00Z", "2026-12-08T11:30:00Z")
B = _block("b", "cr-0123456789abcdef1", 4, "2026-12-05T11:30:00Z", "2026-12-12T11:30:00Z")
LATER = _block("c", "cr-0123456789abcdef2", 4, "2026-12-10T11:30:00Z", "2026-12-17T11:30:00Z")


def _raw(blocks: list[dict], nodes: int, controller: dict | None = None) -> dict:
    raw = valid_raw()
    raw["capacity"] = {"nodes": nodes, "capacity_blocks": copy.deepcopy(blocks)}
    if controller is not None:
        raw["controller"] = controller
    return raw


def _groups(raw: dict) -> list[tuple[str, int, str | None]]:
    return [(g.name, g.size, g.block and g.block.name) for g in parse_config(raw).node_groups()]


def _problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    return [f"{p}: {m}" for p, m in exc.value.problems]


def test_dropping_the_first_block_keeps_the_later_blocks_group():
    """The old rule moved the controller's slot into block b when a was dropped: b's group
    went from 4 to 3 and Auto Scaling terminated a running worker."""
    both = _raw([A, B], 8, {"block": "b"})
    assert _groups(both) == [("controller", 1, "b"), ("block-a", 4, "a"), ("block-b", 3, "b")]
    only_b = _raw([B], 4, {"block": "b"})
    assert _groups(only_b) == [("controller", 1, "b"), ("block-b", 3, "b")]
    # with the host dropped, the controller moves only by an explicit edit
    [problem] = _problems(_raw([B], 4, {"block": "a"}))
    assert problem.startswith(f"{R}.controller.block: names block 'a', which is not in capacity.capacity_blocks (b)")
    assert "controller.placement: dedicated" in problem


def test_several_blocks_name_the_host():
    [problem] = _problems(_raw([A, B], 8))
    assert problem.startswith(f"{R}.controller.block: required with 2 Capacity Blocks")
    # one block: it is the host, named or not
    assert _groups(_raw([A], 4)) == [("controller", 1, "a"), ("block-a", 3, "a")]


def test_dedicated_controller_takes_no_block_slot():
    raw = _raw([A, B], 8, {"placement": "dedicated"})
    assert _groups(raw) == [("controller", 1, None), ("block-a", 4, "a"), ("block-b", 4, "b")]
    cfg = parse_config(raw)
    assert cfg.controller.instance_type == "m7i.xlarge" and cfg.dedicated_controller
    on_demand = valid_raw()
    on_demand["capacity"] = {"nodes": 3}
    on_demand["controller"] = {"placement": "dedicated", "instance_type": "c7i.large"}
    assert _groups(on_demand) == [("controller", 1, None), ("workers", 3, None)]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("p5.48xlarge", "is an accelerated (GPU/EFA) instance type"),
        ("g6.xlarge", "is an accelerated (GPU/EFA) instance type"),
        ("trn1.2xlarge", "is an accelerated (GPU/EFA) instance type"),
        ("m7g.xlarge", "is a Graviton (arm64) type"),
        ("m7i", "is not an EC2 instance type name"),
        ("M7I.XLARGE", "is not an EC2 instance type name"),
    ],
)
def test_dedicated_instance_type_is_a_small_x86_cpu_type(value, says):
    [problem] = _problems(_raw([A], 4, {"placement": "dedicated", "instance_type": value}))
    assert problem.startswith(f"{R}.controller.instance_type: '{value}' {says}"), problem
    assert "e.g. 'm7i.xlarge'" in problem


def test_keys_of_the_other_placement_are_refused():
    assert _problems(_raw([A], 4, {"instance_type": "m7i.large"})) == [
        f"{R}.controller.instance_type: only used with placement: dedicated (a colocated controller is one of "
        "the cluster's GPU nodes); remove it or set controller.placement: dedicated"
    ]
    assert _problems(_raw([A], 4, {"placement": "dedicated", "block": "a"})) == [
        f"{R}.controller.block: only used with placement: block (a dedicated controller is in no block); remove it"
    ]


def test_a_host_block_that_gets_no_node_is_refused():
    [problem] = _problems(_raw([A, B], 4, {"block": "b"}))
    assert problem.startswith(f"{R}.capacity.capacity_blocks[1]: block 'b' hosts the controller but gets no nodes")


def test_blocks_that_do_not_overlap_warn_with_a_colocated_controller():
    gap = _raw([A, LATER], 8, {"block": "a"})
    said = [m for p, m in config_warnings(parse_config(gap)) if p == f"{R}.controller.placement"]
    assert said[0].startswith("blocks 'a' and 'c' do not overlap and the controller runs on a block node")
    assert said[0].endswith("set controller.placement: dedicated")
    assert said[1].startswith("the controller runs in block 'a', which ends before c")
    overlapping = _raw([A, B], 8, {"block": "b"})  # b ends last: no warning
    assert not [p for p, _ in config_warnings(parse_config(overlapping)) if p.startswith(f"{R}.controller")]
    dedicated = _raw([A, LATER], 8, {"placement": "dedicated"})
    assert not [p for p, _ in config_warnings(parse_config(dedicated)) if p.startswith(f"{R}.controller")]
