"""No registry secret (and no accounting database password) reaches user data, the payload,
plan.json, stack outputs or logs.

A stack with every kind of registry login is planned with distinctive secret values
(`offline.plan.write_plan`, the same writer as `python -m offline.plan`); every byte it
writes is searched, the payload tarball member by member. Positive controls prove each
value did flow where it must: the stack secret into the SSM parameter the program
creates, the node's secrets into Enroot's credentials file.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import re
import tarfile
from pathlib import Path

import yaml

from offline.mocks import PlanMocks, declared_blocks, run_under_mocks
from offline.plan import write_plan
from stackfile.reader import PLAN_SECRET_VALUE
from tests.support.mocks import REGION, valid_raw
from tests.support.private_images import SECRETS, _step_box

STACK_SECRET = "STACK-SECRET-7f3a9c1e-do-not-leak"
NGC_KEY = "gpu-cluster:registry_password_ngc"


def _cluster() -> dict:
    raw = valid_raw()
    raw["containers"] = {
        "ecr": True,
        "registry_credentials": [
            {"registry": "nvcr.io", "kind": "stack", "secret": "ngc", "login": "$oauthtoken"},
            {"registry": "authn.nvidia.com", "kind": "stack", "secret": "ngc", "login": "$oauthtoken"},
            {"registry": "registry.example.com", "kind": "secretsmanager", "secret": "team/registry"},
        ],
    }
    return raw


def _stack_file(root: Path, secret_entry) -> None:
    config = {"aws:region": REGION, "gpu-cluster:cluster": _cluster(), NGC_KEY: secret_entry}
    (root / "Pulumi.leak.yaml").write_text(yaml.safe_dump({"config": config}))


def _all_bytes(out: Path) -> list[tuple[str, bytes]]:
    """Every file written, and every member of every payload tarball (and the user data
    gunzipped, with its base64 parts decoded)."""
    found = []
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found.append((str(path), data))
        if path.name == "payload.tar.gz":
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                for m in tar.getmembers():
                    f = tar.extractfile(m)
                    found.append((f"{path}!{m.name}", f.read() if f else b""))
        if path.name == "user-data":
            text = gzip.decompress(data)
            found.append((f"{path}!gunzip", text))
            for entry in yaml.safe_load(text.split(b"\n\n", 2)[2].split(b"\n--")[0]).get("write_files", []):
                found.append((f"{path}!{entry['path']}", gzip.decompress(base64.b64decode(entry["content"]))))
    return found


def test_plan_outputs_hold_no_stack_secret(tmp_path):
    # The stack file holds the value encrypted, as `pulumi config set --secret` writes it;
    # the test runs the program with the real (distinctive) value.
    _stack_file(tmp_path, {"secure": "v1:AAAABBBBCCCC"})
    out = tmp_path / "plan"
    plan = write_plan("leak", out, root=tmp_path, secrets={NGC_KEY: STACK_SECRET})
    files = _all_bytes(out)
    assert any(name.endswith("payload.tar.gz!etc/gpu-cluster/registries.conf") for name, _ in files)
    assert any(name.endswith("user-data!/etc/gpu-cluster/cluster.env") for name, _ in files)
    leaks = [name for name, data in files if STACK_SECRET.encode() in data]
    assert leaks == []
    assert STACK_SECRET not in json.dumps(plan)
    assert STACK_SECRET not in json.dumps(plan["outputs"])
    params = [r for r in plan["resources"] if r["type"] == "aws:ssm/parameter:Parameter"]
    assert [(p["name"], p["inputs"]["value"]) for p in params] == [("t1-registry-ngc", "[secret]")]


def test_plan_without_the_value_runs_on_a_placeholder(tmp_path):
    _stack_file(tmp_path, {"secure": "v1:AAAABBBBCCCC"})
    plan = write_plan("leak", tmp_path / "plan", root=tmp_path)
    assert [r["inputs"]["value"] for r in plan["resources"] if r["type"] == "aws:ssm/parameter:Parameter"] == [
        "[secret]"
    ]
    assert PLAN_SECRET_VALUE not in (tmp_path / "plan" / "plan.json").read_text()


class _Recording(PlanMocks):
    """Keeps the raw inputs as the engine hands them over (secrets still wrapped)."""

    raw: list

    def new_resource(self, args):
        self.raw = getattr(self, "raw", []) + [(args.typ, dict(args.inputs))]
        return super().new_resource(args)


def test_positive_control_the_secret_reaches_the_parameter_as_a_secret():
    raw = _cluster()
    mocks = _Recording(REGION, subnet_az="us-east-2b", blocks=declared_blocks(raw))
    run_under_mocks(raw, REGION, mocks=mocks, secrets={NGC_KEY: STACK_SECRET})
    (value,) = [inputs["value"] for typ, inputs in mocks.raw if typ == "aws:ssm/parameter:Parameter"]
    # Wrapped as a secret by the engine, holding the login document nodes read.
    assert set(value) == {"4dabf18193072939515e22adb298388d", "value"}
    assert json.loads(value["value"]) == {"login": "$oauthtoken", "password": STACK_SECRET}


def test_node_logs_hold_no_secret_but_the_credentials_file_does(tmp_path):
    node, r, _ = _step_box(tmp_path, "systemd")
    assert r.returncode == 0, r.stdout + r.stderr
    creds = node.creds.read_text()
    assert all(s in creds for s in SECRETS)  # positive control
    logs = r.stdout + r.stderr
    for path in (tmp_path / "log").rglob("*"):
        logs += path.read_text()
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            logs += path.read_text()
    logs += node.calls.read_text()
    for s in SECRETS:
        assert s not in logs


# --- the accounting database: RDS generates the password; nothing of ours ever holds it ---


def test_the_accounting_database_password_exists_nowhere_in_what_the_program_writes(tmp_path):
    raw = _cluster()
    raw["accounting"] = {"enabled": True, "second_subnet_id": "subnet-0b1b2c3d4e5f60719"}
    raw["users"] = [{"name": "alice", "uid": 2001, "account": "physics"}]
    config = {"aws:region": REGION, "gpu-cluster:cluster": raw, NGC_KEY: {"secure": "v1:AAAABBBBCCCC"}}
    (tmp_path / "Pulumi.team.yaml").write_text(yaml.safe_dump({"config": config}))
    out = tmp_path / "plan"
    plan = write_plan("team", out, root=tmp_path, secrets={NGC_KEY: STACK_SECRET})
    (db,) = [r for r in plan["resources"] if r["type"] == "aws:rds/instance:Instance"]
    # no password input at all: RDS makes one and keeps it in Secrets Manager
    assert db["inputs"]["manageMasterUserPassword"] is True
    assert [k for k in db["inputs"] if "password" in k.lower()] == ["manageMasterUserPassword"]
    files = _all_bytes(out)
    templates = [d for n, d in files if n.endswith("!opt/gpu-cluster/templates/slurmdbd.conf")]
    assert templates and all(b"StoragePass=@STORAGE_PASS@\n" in t for t in templates)  # positive control
    # every StoragePass anywhere is the placeholder: no value was rendered
    for name, data in files:
        for m in re.finditer(rb"StoragePass=(\S*)", data):
            assert m.group(1) == b"@STORAGE_PASS@", name
    # the nodes and the outputs get where the secret is (its ARN), never what it holds
    secret_arn = plan["outputs"]["accounting_database"]["secret_arn"]
    assert secret_arn.startswith("arn:aws:secretsmanager:") and ":secret:rds!db-" in secret_arn
    env = next(d for n, d in files if n.endswith("user-data!/etc/gpu-cluster/cluster.env"))
    assert secret_arn.encode() in env
    (policy,) = [r for r in plan["resources"] if r["name"].endswith("-controller-accounting-secret")]
    assert json.loads(policy["inputs"]["policy"])["Statement"][0]["Resource"] == secret_arn
