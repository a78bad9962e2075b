"""The CloudWatch agent's configuration (userdata/cloudwatch_agent.py), checked against the
agent's own JSON schema (tests/data/cloudwatch-agent/, unchanged from the agent's
repository) and for what it says: which files go to which stream of which group."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema
import pytest

from model.catalog import CATALOG
from tests.support.user_data import config
from userdata import cloudwatch_agent as cw
from userdata import layout

DATA = Path(__file__).resolve().parents[1] / "data" / "cloudwatch-agent"
SCHEMA_SHA256 = "aafb2447a5cb3f32e6ed0ccaa9cc030c7da0b6055ea8458b292502d6111362dd"
HOOK = {"hooks": {"on_node_ready": {"script": "#!/bin/sh\ntrue\n"}}}
TEAM = {"accounting": {"enabled": True}}


@pytest.fixture(scope="module")
def validator():
    raw = (DATA / "schema.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == SCHEMA_SHA256  # the file SOURCES.md describes
    schema = json.loads(raw)
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def _filled(text: str) -> dict:
    """As step 25 writes it on node ip-10-0-1-6 (i-0123456789abcdef0)."""
    return json.loads(text.replace(cw.NODE_NAME, "ip-10-0-1-6").replace(cw.INSTANCE_ID, "i-0123456789abcdef0"))


@pytest.mark.parametrize("extra", [{}, HOOK, TEAM, {**HOOK, **TEAM}], ids=["plain", "hook", "accounting", "both"])
def test_both_configurations_are_valid_for_the_agents_schema(validator, extra):
    files = cw.cloudwatch_files(config(**extra))
    assert set(files) == {layout.CLOUDWATCH_AGENT_NODE_CONFIG, layout.CLOUDWATCH_AGENT_CONTROLLER_CONFIG}
    for path, text in files.items():
        errors = sorted(validator.iter_errors(_filled(text)), key=str)
        assert errors == [], (path, [e.message for e in errors])


def test_the_schema_refuses_what_the_agent_would_refuse(validator):
    """Not vacuous: the schema bites on the sections the configurations use."""
    doc = _filled(cw.cloudwatch_files(config())[layout.CLOUDWATCH_AGENT_NODE_CONFIG])
    bad_key = json.loads(json.dumps(doc))
    bad_key["logs"]["logs_collected"]["files"]["collect_list"][0]["log_stream"] = "x"  # not log_stream_name
    bad_retention = json.loads(json.dumps(doc))
    bad_retention["logs"]["logs_collected"]["files"]["collect_list"][0]["retention_in_days"] = 31
    no_path = json.loads(json.dumps(doc))
    del no_path["logs"]["logs_collected"]["files"]["collect_list"][0]["file_path"]
    for broken in (bad_key, bad_retention, no_path):
        assert list(validator.iter_errors(broken)), broken


def test_every_node_ships_its_boot_cloud_init_and_slurmd_logs_to_the_stacks_group():
    doc = cw.node_config(config())
    assert doc["agent"] == {"logfile": cw.AGENT_LOGFILE, "run_as_user": "root"}
    assert doc["logs"]["force_flush_interval"] == 5
    assert doc["logs"]["logs_collected"]["files"]["collect_list"] == [
        {
            "file_path": "/var/log/gpu-cluster/boot.log",
            "log_group_name": "/gpu-cluster/demo",
            "log_stream_name": "@NODE_NAME@/@INSTANCE_ID@/boot",
        },
        {
            "file_path": "/var/log/cloud-init-output.log",
            "log_group_name": "/gpu-cluster/demo",
            "log_stream_name": "@NODE_NAME@/@INSTANCE_ID@/cloud-init",
        },
        {
            "file_path": "/var/log/slurm/slurmd.log",
            "log_group_name": "/gpu-cluster/demo",
            "log_stream_name": "@NODE_NAME@/@INSTANCE_ID@/slurmd",
        },
    ]
    with_hook = cw.node_config(config(**HOOK))["logs"]["logs_collected"]["files"]["collect_list"]
    assert with_hook[-1]["file_path"] == layout.ON_NODE_READY_LOG
    assert with_hook[-1]["log_stream_name"].endswith("/on-node-ready")


def test_the_controller_adds_its_daemons_and_the_newest_validation_summary():
    collect = cw.controller_config(config(**TEAM))["logs"]["logs_collected"]["files"]["collect_list"]
    assert [(c["file_path"], c["log_stream_name"]) for c in collect] == [
        ("/var/log/slurm/slurmctld.log", "@NODE_NAME@/@INSTANCE_ID@/slurmctld"),
        ("/var/log/slurm/slurmdbd.log", "@NODE_NAME@/@INSTANCE_ID@/slurmdbd"),
        ("/fsx/.gpu-cluster/demo/validation/*/summary.txt", "cluster/validation"),
    ]
    assert "agent" not in cw.controller_config(config())  # appended to the node's: one agent section
    plain = cw.controller_config(config())["logs"]["logs_collected"]["files"]["collect_list"]
    assert [c["log_stream_name"].rsplit("/", 1)[-1] for c in plain] == ["slurmctld", "validation"]


def test_the_paths_are_the_ones_the_daemons_write():
    from userdata import slurm_conf

    conf = slurm_conf.render_slurm_files("demo", "gpu", CATALOG["p5.48xlarge"])["/opt/gpu-cluster/templates/slurm.conf"]
    assert f"SlurmctldLogFile={layout.SLURMCTLD_LOG}\n" in conf and f"SlurmdLogFile={layout.SLURMD_LOG}\n" in conf
    from userdata.accounting_files import AccountingEndpoint, accounting_files

    endpoint = AccountingEndpoint("db.example", 3306, "arn:aws:secretsmanager:us-east-2:1:secret:rds!db-x", "us-east-2")
    dbd = accounting_files(config(**TEAM), endpoint)[layout.SLURMDBD_CONF_TEMPLATE]
    assert f"LogFile={layout.SLURMDBD_LOG}\n" in dbd


def test_without_logs_nothing_is_rendered_and_steps_are_told():
    cfg = config(logs={"enabled": False})
    assert cw.cloudwatch_files(cfg) == {}
    assert cw.logs_env(cfg) == [("LOGS_ENABLED", 0)]
    env = dict(cw.logs_env(config()))
    assert env["LOG_GROUP"] == "/gpu-cluster/demo" and env["METRICS_NAMESPACE"] == "GpuCluster/demo"
