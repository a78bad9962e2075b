"""`accounting`, `users` and `login`: what is accepted, and every refusal with its path and fix."""

from __future__ import annotations

import pytest

from model.config import parse_config
from model.errors import ConfigError
from model.users import users_conf
from tests.support.mocks import valid_raw

ROOT = "gpu-cluster:cluster"
SECOND = "subnet-0b1b2c3d4e5f60719"


def _raw(**sections) -> dict:
    raw = valid_raw()
    raw["accounting"] = {"enabled": True, "second_subnet_id": SECOND}
    raw.update(sections)
    return raw


def _problems(raw) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    return [f"{p}: {m}" for p, m in err.value.problems]


ALICE = {"name": "alice", "uid": 2001, "account": "physics"}
BOB = {"name": "bob", "uid": 2002, "gid": 3000, "group": "vision", "account": "vision", "admin": True}


def test_a_team_stack_parses_with_defaults_filled_in():
    cfg = parse_config(_raw(users=[ALICE, BOB], login={"count": 1}))
    assert cfg.accounting.instance_class == "db.t4g.small" and cfg.accounting.protect
    assert cfg.accounting.priority.fairshare == 10000
    alice, bob = cfg.users
    assert (alice.primary_gid, alice.group_name, alice.home) == (2001, "alice", "/fsx/home/alice")
    assert (bob.primary_gid, bob.group_name, bob.admin) == (3000, "vision", True)
    assert cfg.login.count == 1 and cfg.login.instance_type == "m7i.large"
    assert users_conf(cfg.users).splitlines()[1:] == [
        "alice 2001 alice 2001 physics 0 -",
        "bob 2002 vision 3000 vision 1 -",
    ]


@pytest.mark.parametrize(
    ("user", "path", "needle"),
    [
        ({"name": "root", "uid": 2001, "account": "a"}, "users[0].name", "already own"),
        ({"name": "ubuntu", "uid": 2001, "account": "a"}, "users[0].name", "already own"),
        ({"name": "ssm-user", "uid": 2001, "account": "a"}, "users[0].name", "already own"),
        ({"name": "systemd-foo", "uid": 2001, "account": "a"}, "users[0].name", "already own"),
        ({"name": "Alice", "uid": 2001, "account": "a"}, "users[0].name", "not a valid login name"),
        ({"name": "alice", "uid": 1000, "account": "a"}, "users[0].uid", "outside 2000-60000"),
        ({"name": "alice", "uid": 500, "account": "a"}, "users[0].uid", "system range"),
        ({"name": "alice", "uid": 65534, "account": "a"}, "users[0].uid", "outside 2000-60000"),
        ({"name": "alice", "uid": 2001, "gid": 100, "account": "a"}, "users[0].gid", "outside"),
        ({"name": "alice", "uid": 2001, "account": "root"}, "users[0].account", "not 'root'"),
        ({"name": "alice", "uid": 2001, "account": "a", "default_qos": "Hi Q"}, "users[0].default_qos", "QOS"),
    ],
)
def test_a_bad_user_is_refused_at_its_key(user, path, needle):
    problems = _problems(_raw(users=[user]))
    assert any(p.startswith(f"{ROOT}.{path}: ") and needle in p for p in problems), problems


def test_duplicate_names_and_uids_are_refused_with_the_earlier_entry_named():
    problems = _problems(_raw(users=[ALICE, {**ALICE, "uid": 2005}, {"name": "carol", "uid": 2001, "account": "x"}]))
    assert f"{ROOT}.users[1].name: 'alice' is already users[0]; names must be unique" in problems
    assert any(p.startswith(f"{ROOT}.users[2].uid: 2001 is already the uid of users[0]") for p in problems)


def test_a_gid_whose_group_name_differs_between_entries_is_refused():
    carol = {"name": "carol", "uid": 2003, "gid": 3000, "group": "optics", "account": "vision"}
    problems = _problems(_raw(users=[BOB, carol]))
    assert any(p.startswith(f"{ROOT}.users[1].group: gid 3000 is group 'vision'") for p in problems), problems
    dave = {"name": "dave", "uid": 2004, "gid": 3001, "group": "vision", "account": "vision"}
    problems = _problems(_raw(users=[BOB, dave]))
    assert any(p.startswith(f"{ROOT}.users[1].gid: group 'vision' has gid 3000") for p in problems), problems


def test_users_need_accounting():
    raw = valid_raw()
    raw["users"] = [ALICE]
    assert _problems(raw) == [
        f"{ROOT}.users: needs accounting.enabled: true: each user's Slurm account, fair share and QOS live in "
        "slurmdbd; enable accounting or remove users"
    ]


def test_the_second_subnet_is_required_with_an_existing_subnet_and_refused_otherwise():
    raw = valid_raw()
    raw["accounting"] = {"enabled": True}
    (problem,) = _problems(raw)
    assert problem.startswith(f"{ROOT}.accounting.second_subnet_id: required with network.subnet_id")
    raw["accounting"]["second_subnet_id"] = raw["network"]["subnet_id"]
    (problem,) = _problems(raw)
    assert "RDS needs a subnet in another AZ" in problem
    raw["network"].pop("subnet_id")
    raw["accounting"]["second_subnet_id"] = SECOND
    (problem,) = _problems(raw)
    assert problem.startswith(f"{ROOT}.accounting.second_subnet_id: only used with network.subnet_id")
    raw["accounting"] = {"second_subnet_id": SECOND}
    (problem,) = _problems(raw)
    assert problem == f"{ROOT}.accounting.second_subnet_id: only used with accounting.enabled: true; remove it"


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("instance_class", "t4g.small", "not an RDS instance class"),
        ("storage_gib", 10, "greater than or equal to 20"),
        ("backup_retention_days", 0, "greater than or equal to 1"),
    ],
)
def test_bad_database_settings_are_refused(key, value, needle):
    raw = _raw()
    raw["accounting"][key] = value
    problems = _problems(raw)
    assert any(p.startswith(f"{ROOT}.accounting.{key}: ") and needle in p for p in problems), problems


@pytest.mark.parametrize(
    ("value", "needle"),
    [("p5.48xlarge", "a login node runs no jobs"), ("m7g.large", "Graviton"), ("large", "not an EC2 instance type")],
)
def test_a_login_node_type_must_be_a_small_x86_cpu_type(value, needle):
    problems = _problems(_raw(login={"count": 1, "instance_type": value}))
    assert any(p.startswith(f"{ROOT}.login.instance_type: ") and needle in p for p in problems), problems
