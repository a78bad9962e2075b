"""`slurm.partitions` and `slurm.custom_settings`: rendering, refusals, and Slurm 23.11's table.

Refusals come before anything is created, with the config key: a setting the program
writes (named with the section that controls it, matched without regard to case as
Slurm matches keys), a key or value Slurm 23.11 does not accept (model/slurm_keys.py,
from the 23.11.4 source), a partition over a block the stack does not have. What real
slurmctld 22.05 does with the NodeSet lines (a dynamic node joins by its block feature)
is tests/daemons/test_partitions_oracle.py.
"""

from __future__ import annotations

import pytest

from model.accounting import PriorityWeights
from model.config import parse_config
from model.errors import ConfigError
from model.health import HealthConfig
from model.slurm import PROGRAM_KEYS
from model.slurm_keys import table_23_11
from tests.support.mocks import valid_raw
from userdata import layout, slurm_conf
from userdata.accounting_files import accounting_settings
from userdata.render import FsxEndpoint, node_files

ROOT = "gpu-cluster:cluster.slurm"
FILLED = {"@CONTROLLER_HOST@": "ip-10-0-1-5", "@CONTROLLER_ADDR@": "10.0.1.5", "@MAX_NODES@": "36"}


def _raw(**slurm) -> dict:
    raw = valid_raw()
    raw["slurm"] = slurm
    return raw


def _problems(raw) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    return [f"{p}: {m}" for p, m in err.value.problems]


def _conf(raw) -> str:
    cfg = parse_config(raw)
    text = node_files(cfg, cfg.spec, FsxEndpoint("d", "m"))[layout.SLURM_CONF_TEMPLATE].decode()
    for k, v in FILLED.items():
        text = text.replace(k, v)
    return text


def test_the_program_keys_are_exactly_what_the_renderer_writes():
    from model.catalog import CATALOG

    # topology tree without a switch wait: SchedulerParameters is the stack's key (the
    # program only adds max_switch_wait to it, test below)
    settings = slurm_conf.slurm_conf_settings(
        "c", CATALOG["p5.48xlarge"], HealthConfig(), accounting_settings(PriorityWeights()), topology="tree"
    )
    written = {k for k, _ in settings}
    line_keys = {"PartitionName", "NodeSet", "NodeName", "DownNodes", "FrontendName", "Include"}
    assert set(PROGRAM_KEYS) - line_keys == written


def test_partitions_per_block_and_a_debug_partition_render_as_nodesets_and_lines():
    raw = _raw(
        partitions=[
            {"name": "blocka", "blocks": ["a"]},
            {"name": "debug", "max_time_minutes": 30, "default_time_minutes": 10},
        ],
        custom_settings={"SchedulerParameters": "bf_continue,bf_window=2880", "KillWait": 60},
    )
    text = _conf(raw)
    lines = text.splitlines()
    assert lines[-4:] == [
        "PartitionName=train Nodes=ALL Default=YES DefaultTime=60 MaxTime=INFINITE State=UP",
        "NodeSet=ns-block-a Feature=block-a",
        "PartitionName=blocka Nodes=ns-block-a DefaultTime=60 MaxTime=INFINITE State=UP",
        "PartitionName=debug Nodes=ALL DefaultTime=10 MaxTime=30 State=UP",
    ]
    # the job templates' --switches wait joins the stack's scheduler parameters
    assert "SchedulerParameters=bf_continue,bf_window=2880,max_switch_wait=900" in lines and "KillWait=60" in lines
    assert sum(1 for ln in lines if ln.startswith("SchedulerParameters=")) == 1
    assert table_23_11().problems("slurm.conf", text) == []


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("SelectType", "select/linear", "SelectType is written by the program"),
        ("priorityweightage", "5", "set by accounting.priority"),
        ("HealthCheckInterval", "60", "set by health"),
        ("PartitionName", "x Nodes=ALL", "set by slurm.partitions"),
        (
            "SchedulerParamters",
            "bf_continue",
            "not a slurm.conf key in Slurm 23.11.4 (did you mean SchedulerParameters?)",
        ),
        ("KillWait", "soon", "not a number"),
        ("MessageTimeout", "10 # comment", "cannot be one slurm.conf value"),
    ],
)
def test_a_custom_setting_the_program_owns_or_23_11_refuses_is_refused_with_its_key(key, value, needle):
    problems = _problems(_raw(custom_settings={key: value}))
    assert any(p.startswith(f"{ROOT}.custom_settings.{key}: ") and needle in p for p in problems), problems


def test_bad_partitions_are_refused():
    problems = _problems(
        _raw(
            partitions=[
                {"name": "train"},
                {"name": "x", "blocks": ["zz"]},
                {"name": "dbg", "max_time_minutes": 30},
            ]
        )
    )
    assert f"{ROOT}.partitions[0].name: 'train' is already slurm.partition" in problems
    assert any(p.startswith(f"{ROOT}.partitions[1].blocks[0]: 'zz' is not a block of this stack (a)") for p in problems)
    assert any(p.startswith(f"{ROOT}.partitions[2].default_time_minutes: DefaultTime 60 is above") for p in problems)
    (problem,) = _problems(_raw(partitions=[{"name": "default"}]))
    assert problem.startswith(f"{ROOT}.partitions[0].name: 'default' is not a valid Slurm partition name")


def test_team_and_custom_files_are_accepted_by_23_11():
    raw = _raw(custom_settings={"MaxJobCount": 20000})
    raw["accounting"] = {"enabled": True, "second_subnet_id": "subnet-0b1b2c3d4e5f60719"}
    cfg = parse_config(raw)
    from userdata.accounting_files import AccountingEndpoint

    files = node_files(cfg, cfg.spec, FsxEndpoint("d", "m"), accounting=AccountingEndpoint("h", 3306, "arn", "r"))
    text = files[layout.SLURM_CONF_TEMPLATE].decode()
    for k, v in FILLED.items():
        text = text.replace(k, v)
    assert "AccountingStorageType=accounting_storage/slurmdbd" in text and "MaxJobCount=20000" in text
    assert table_23_11().problems("slurm.conf", text) == []
