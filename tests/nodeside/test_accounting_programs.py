"""The controller's accounting programs: slurmdbd.conf from the secret, and the sacctmgr sync.

gpu-cluster-slurmdbd-conf is run against botocore's Stubber (the Secrets Manager call
as AWS's model defines it) and against the lanes' secret file; the escaping is checked
against Slurm's own parsing rules (parse_config.c: an unescaped `#` starts a comment, a
backslash escapes the next character); the real slurmdbd reading such a password is the
team lane (tests/daemons/test_team_faithful.py). The sync's plan is checked from
sacctmgr listings; a second run over the state it produced adds nothing.
"""

from __future__ import annotations

import json
import os

import pytest
from botocore.stub import Stubber

from nodeside import accounting_sync as sync
from nodeside import slurmdbd_conf as dbd
from tests.support.ops_stubs import fake_client

ARN = "arn:aws:secretsmanager:us-east-2:123456789012:secret:rds!db-0a1b2c3d-AbCdEf"
PASSWORD = "Zq#9\\x<>!$w"  # `#` and `\` must be escaped for Slurm; the rest goes as is
TEMPLATE = "DbdHost=@DBD_HOST@\nStorageUser=@STORAGE_USER@\nStoragePass=@STORAGE_PASS@\n"


def _unescape_like_slurm(value: str) -> str:
    """parse_config.c: cut at the first '#' after an even number of backslashes, then
    drop each backslash and keep the character after it."""
    bs, cut = 0, len(value)
    for i, c in enumerate(value):
        if c == "#" and bs % 2 == 0:
            cut = i
            break
        bs = bs + 1 if c == "\\" else 0
    out, i, line = [], 0, value[:cut]
    while i < len(line):
        if line[i] == "\\":
            i += 1
        if i < len(line):
            out.append(line[i])
        i += 1
    return "".join(out)


@pytest.mark.parametrize("password", [PASSWORD, "plain", "#lead", "trail\\", "a\\#b", "##\\\\"])
def test_escaped_passwords_read_back_unchanged_by_slurms_rules(password):
    assert _unescape_like_slurm(dbd.slurm_escape(password)) == password


@pytest.mark.parametrize("password", ["with space", 'q"uote', "tab\tx", "new\nline"])
def test_a_password_slurmdbd_conf_cannot_carry_is_refused_without_showing_it(password):
    with pytest.raises(dbd.BadSecret) as err:
        dbd.slurm_escape(password)
    assert password not in str(err.value)


def _env(tmp_path, **more):
    (tmp_path / "tpl").write_text(TEMPLATE)
    return {
        "SLURMDBD_CONF_TEMPLATE": str(tmp_path / "tpl"),
        "SLURMDBD_CONF": str(tmp_path / "etc" / "slurmdbd.conf"),
        "NODE_NAME": "ip-10-0-0-5",
        "ACCOUNTING_DB_SECRET_ARN": ARN,
        "ACCOUNTING_REGION": "us-east-2",
        **more,
    }


def _secrets_client(secret: str | None = None, error: str | None = None):
    client = fake_client("secretsmanager", "us-east-2")
    stub = Stubber(client)
    if error:
        stub.add_client_error("get_secret_value", service_error_code=error, expected_params={"SecretId": ARN})
    else:
        answer = {"ARN": ARN, "Name": "rds!db-0a1b2c3d", "SecretString": secret}
        stub.add_response("get_secret_value", answer, {"SecretId": ARN})
    stub.activate()
    return client, stub


def test_the_secret_from_secrets_manager_becomes_a_0600_file_once(tmp_path):
    env = _env(tmp_path)
    secret = json.dumps({"username": "slurmdbd", "password": PASSWORD, "engine": "mariadb"})
    client, stub = _secrets_client(secret)
    assert dbd.run(env, client) == (0, "changed")
    stub.assert_no_pending_responses()
    conf = tmp_path / "etc" / "slurmdbd.conf"
    assert conf.read_text() == "DbdHost=ip-10-0-0-5\nStorageUser=slurmdbd\nStoragePass=Zq\\#9\\\\x<>!$w\n"
    assert oct(conf.stat().st_mode & 0o777) == "0o600"
    client, _ = _secrets_client(secret)
    assert dbd.run(env, client) == (0, "unchanged")
    rotated = json.dumps({"username": "slurmdbd", "password": "new-one"})
    client, _ = _secrets_client(rotated)
    assert dbd.run(env, client) == (0, "changed")
    assert conf.read_text().endswith("StoragePass=new-one\n")


def test_a_denied_read_is_exit_3_naming_the_action_and_never_writes(tmp_path):
    client, _ = _secrets_client(error="AccessDeniedException")
    rc, said = dbd.run(_env(tmp_path), client)
    assert rc == 3 and ARN in said and "secretsmanager:GetSecretValue" in said
    assert not (tmp_path / "etc").exists()


@pytest.mark.parametrize(
    "secret", ["not json", json.dumps({"username": "x"}), json.dumps({"username": "", "password": "p"})]
)
def test_a_malformed_secret_is_exit_2(tmp_path, secret):
    client, _ = _secrets_client(secret)
    rc, said = dbd.run(_env(tmp_path), client)
    assert rc == 2 and "username" in said


def test_the_lanes_secret_file_swap_takes_the_same_path(tmp_path, capsys, monkeypatch):
    f = tmp_path / "secret.json"
    f.write_text(json.dumps({"username": "slurmdbd", "password": PASSWORD}))
    env = _env(tmp_path, GPU_CLUSTER_DB_SECRET_FILE=str(f))
    monkeypatch.setattr(os, "environ", env)
    assert dbd.main() == 0
    out = capsys.readouterr()
    assert out.out == "changed\n" and PASSWORD not in out.out + out.err
    monkeypatch.setattr(os, "environ", {**env, "GPU_CLUSTER_DB_SECRET_FILE": str(tmp_path / "missing")})
    assert dbd.main() == 3
    assert "cannot read the database secret file" in capsys.readouterr().err


USERS_CONF = """# name uid group gid account admin default_qos
alice 2001 alice 2001 physics 0 -
bob 2002 vision 3000 vision 1 interactive
"""
EMPTY = {"clusters": "", "accounts": "root\n", "qos": "normal\n", "users": "root|root|Administrator\n", "assocs": ""}


def test_a_fresh_database_gets_the_cluster_accounts_qos_and_users():
    users = sync.parse_users(USERS_CONF)
    cmds = sync.plan("c1", users, sync.parse_listing("c1", EMPTY))
    assert cmds == [
        ["add", "cluster", "c1"],
        ["add", "account", "physics", "cluster=c1", "parent=root", "description=physics"],
        ["add", "account", "vision", "cluster=c1", "parent=root", "description=vision"],
        ["add", "qos", "interactive"],
        ["add", "user", "alice", "account=physics", "cluster=c1", "defaultaccount=physics"],
        ["add", "user", "bob", "account=vision", "cluster=c1", "defaultaccount=vision"],
        ["modify", "user", "where", "name=bob", "set", "adminlevel=Administrator"],
        [
            "modify",
            "user",
            "where",
            "name=bob",
            "account=vision",
            "cluster=c1",
            "set",
            "qos+=interactive",
            "defaultqos=interactive",
        ],
    ]


def test_a_second_run_over_what_the_first_made_changes_nothing():
    done = {
        "clusters": "c1\n",
        "accounts": "physics\nroot\nvision\n",
        "qos": "interactive\nnormal\n",
        "users": "alice|physics|None\nbob|vision|Administrator\nroot|root|Administrator\n",
        "assocs": "c1|root||\nc1|root|root|\nc1|physics||\nc1|physics|alice|\nc1|vision||\nc1|vision|bob|interactive\n",
    }
    assert sync.plan("c1", sync.parse_users(USERS_CONF), sync.parse_listing("c1", done)) == []
    # bob no longer an admin, alice moved to another account: only those edits
    edited = USERS_CONF.replace("vision 1 interactive", "vision 0 interactive").replace("physics 0", "optics 0")
    assert sync.plan("c1", sync.parse_users(edited), sync.parse_listing("c1", done)) == [
        ["add", "account", "optics", "cluster=c1", "parent=root", "description=optics"],
        ["add", "user", "alice", "account=optics", "cluster=c1"],
        ["modify", "user", "where", "name=bob", "set", "adminlevel=None"],
    ]


def test_a_malformed_users_conf_is_refused_with_its_line():
    with pytest.raises(ValueError, match="users.conf line 2"):
        sync.parse_users("# header\nalice 2001 alice\n")
