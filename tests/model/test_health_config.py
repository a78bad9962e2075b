"""The `health` section: defaults, Slurm's values, and bad input as `path: message`."""

from __future__ import annotations

import pytest

from model.config import parse_config
from model.dcgm import DcgmIdleConfig
from model.errors import ConfigError
from model.health import HealthConfig

BASE = {
    "name": "demo",
    "instance_type": "p5.48xlarge",
    "network": {"availability_zone": "us-east-2b"},
    "capacity": {"nodes": 2},
}


def test_defaults_and_node_state_value():
    cfg = parse_config(BASE)
    assert cfg.health == HealthConfig()
    assert cfg.health.enabled and cfg.health.interval_seconds == 300
    assert cfg.health.node_state_value() == "ANY"
    assert HealthConfig(node_states=("IDLE", "MIXED"), cycle=True).node_state_value() == "IDLE,MIXED,CYCLE"
    assert HealthConfig(node_states=("ALLOC", "ANY")).node_state_value() == "ANY"
    assert cfg.health.clock_reference == ""
    assert HealthConfig(clock_reference="169.254.169.123").clock_reference == "169.254.169.123"
    assert HealthConfig(clock_reference="127.0.0.1:1123").clock_reference == "127.0.0.1:1123"


def test_deep_dcgm_on_idle_nodes_defaults_and_bounds():
    d = parse_config(BASE).health.dcgm_idle
    assert (d.level, d.every_hours, d.idle_minutes, d.max_nodes, d.limit_minutes()) == (2, 24, 30, 1, 20)
    assert DcgmIdleConfig(level=3).limit_minutes() == 60
    assert DcgmIdleConfig(level=3, time_limit_minutes=90).limit_minutes() == 90


@pytest.mark.parametrize(
    ("health", "path", "words"),
    [
        ({"interval_seconds": 10}, "gpu-cluster:cluster.health.interval_seconds", "greater than or equal to 30"),
        ({"node_states": ["BUSY"]}, "gpu-cluster:cluster.health.node_states[0]", "ANY"),
        ({"node_states": []}, "gpu-cluster:cluster.health.node_states", "at least 1"),
        ({"nvme_min_free_percent": 95}, "gpu-cluster:cluster.health.nvme_min_free_percent", "90"),
        ({"xid_source": "/var/log/kern.log"}, "gpu-cluster:cluster.health.xid_source", ""),
        ({"clock_reference": "ntp://169.254.169.123"}, "gpu-cluster:cluster.health.clock_reference", "host[:port]"),
        ({"clock_reference": "169.254.169.123:70000"}, "gpu-cluster:cluster.health.clock_reference", "1..65535"),
        ({"dcgm_idle": {"level": 1}}, "gpu-cluster:cluster.health.dcgm_idle.level", "0, 2 or 3"),
        (
            {"dcgm_idle": {"every_hours": 0}},
            "gpu-cluster:cluster.health.dcgm_idle.every_hours",
            "greater than or equal to 1",
        ),
        (
            {"dcgm_idle": {"max_nodes": 0}},
            "gpu-cluster:cluster.health.dcgm_idle.max_nodes",
            "greater than or equal to 1",
        ),
        ({"dcgm_idle": {"time_limit_minutes": 2}}, "gpu-cluster:cluster.health.dcgm_idle.time_limit_minutes", "5"),
        ({"dcgm_idle": {"when": "nightly"}}, "gpu-cluster:cluster.health.dcgm_idle.when", ""),
    ],
)
def test_bad_values_name_the_key(health, path, words):
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, "health": health})
    text = str(err.value)
    assert path in text and words in text, text
