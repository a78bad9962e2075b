"""The `health` section: defaults, Slurm's values, and bad input as `path: message`."""

from __future__ import annotations

import pytest

from model.config import parse_config
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


@pytest.mark.parametrize(
    ("health", "path", "words"),
    [
        ({"interval_seconds": 10}, "gpu-cluster:cluster.health.interval_seconds", "greater than or equal to 30"),
        ({"node_states": ["BUSY"]}, "gpu-cluster:cluster.health.node_states[0]", "ANY"),
        ({"node_states": []}, "gpu-cluster:cluster.health.node_states", "at least 1"),
        ({"nvme_min_free_percent": 95}, "gpu-cluster:cluster.health.nvme_min_free_percent", "90"),
        ({"xid_source": "/var/log/kern.log"}, "gpu-cluster:cluster.health.xid_source", ""),
    ],
)
def test_bad_values_name_the_key(health, path, words):
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, "health": health})
    text = str(err.value)
    assert path in text and words in text, text
