"""Private images (`containers`): config, what the node role may read, the node files,
and the login program run for real against a stand-in `aws` (docs/images.md)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess

import pytest

from infra.iam import registry_read_policy
from model.config import parse_config
from model.containers import ContainersConfig
from model.errors import ConfigError
from model.registries import registry_access
from offline.mocks import SECRET_SHOWN
from tests.support.mocks import REGION, run_program, valid_raw
from tests.support.private_images import (
    ACCOUNT,
    ANSWERS,
    BOOT,
    CONF,
    ECR_PASSWORD,
    NGC_KEY_VALUE,
    OTHER,
    OWN,
    PRIVATE_PASSWORD,
    SECRETS,
    Node,
    _step_box,
)
from tests.support.shellcheck import shellcheck
from userdata import layout
from userdata.registries import SOURCE_DIR as REG_TEMPLATES

R = "gpu-cluster:cluster.containers"
NGC = {"registry": "nvcr.io", "kind": "ssm", "secret": "/gpu-cluster/ngc"}
PRIVATE = {"registry": "registry.example.com:5000", "kind": "secretsmanager", "secret": "team/registry"}
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
PARAMETER = "aws:ssm/parameter:Parameter"
NEW_FILES = {
    layout.REGISTRIES_CONF,
    layout.REGISTRY_LOGIN,
    f"{layout.STEPS}/65-registries.sh",
    f"{layout.SYSTEMD_DIR}/gpu-cluster-registry-login.service",
    f"{layout.SYSTEMD_DIR}/gpu-cluster-registry-login.timer",
}


def _raw(**containers):
    raw = valid_raw()
    raw["containers"] = containers
    return raw


def _problems(containers) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as err:
        parse_config(_raw(**containers))
    return err.value.problems


# --- config ------------------------------------------------------------------------------


def _secrets(n: int, name_len: int = 200) -> list[dict]:
    return [
        {"registry": f"r{i}.example.com", "kind": "secretsmanager", "secret": "s" * name_len + str(i)} for i in range(n)
    ]


def test_role_inline_policies_over_iams_limit_are_refused_up_front():
    """The registries' policy shares IAM's 10,240 characters per role with the program's own
    and node_iam.statements: too many long secret names is a config problem, not a
    LimitExceeded from IAM after the network and FSx exist."""
    (problem,) = _problems({"ecr": True, "registry_credentials": _secrets(40)})
    assert problem[0] == R
    assert problem[1].startswith("the node role's inline policies come to about ")
    assert "IAM takes 10240 for all inline policies of a role" in problem[1]
    parse_config(_raw(ecr=True, registry_credentials=_secrets(5)))  # a normal list fits


def test_role_inline_policies_count_node_iam_statements_too():
    raw = _raw(ecr=True, registry_credentials=_secrets(12))
    parse_config(raw)  # fits alone
    resources = [f"arn:aws:s3:::bucket-{i:03d}-" + "d" * 40 + "/*" for i in range(110)]
    raw["node_iam"] = {"statements": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": resources}]}
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    ((path, message),) = err.value.problems
    assert path == R and "node_iam.statements" in message


@pytest.mark.parametrize(
    "containers, path, fragment",
    [
        ({"ecr": "yes"}, f"{R}.ecr", "'yes' is not true/false or a list"),
        ({"ecr": [123456789012]}, f"{R}.ecr", "quote account ids in YAML"),
        ({"ecr": []}, f"{R}.ecr", "an empty list grants nothing"),
        ({"ecr": ["12345"]}, f"{R}.ecr[0]", "neither a 12-digit account id nor an ECR registry host"),
        ({"ecr": ["123456789012.dkr.ecr.us-east-2.amazonaws.org"]}, f"{R}.ecr[0]", "ECR registry host"),
        ({"ecr": [OWN, OWN]}, f"{R}.ecr[1]", "listed twice"),
        ({"registry_credentials": [{**NGC, "kind": "vault"}]}, f"{R}.registry_credentials[0].kind", "'ssm'"),
        (
            {"registry_credentials": [{**NGC, "registry": "NVCR.io"}]},
            f"{R}.registry_credentials[0].registry",
            "lowercase",
        ),
        (
            {"registry_credentials": [{**NGC, "registry": "https://nvcr.io/v2"}]},
            f"{R}.registry_credentials[0].registry",
            "no scheme, no path",
        ),
        (
            {"registry_credentials": [{**NGC, "registry": OWN}]},
            f"{R}.registry_credentials[0].registry",
            "containers.ecr",
        ),
        (
            {"registry_credentials": [NGC, {**NGC, "secret": "/other"}]},
            f"{R}.registry_credentials[1].registry",
            "one login per host name",
        ),
        (
            {"registry_credentials": [PRIVATE, {**PRIVATE, "registry": "registry.example.com"}]},
            f"{R}.registry_credentials[1].registry",
            "ports aside",
        ),
        (
            {"registry_credentials": [{**NGC, "secret": "ngc key"}]},
            f"{R}.registry_credentials[0].secret",
            "SSM parameter name",
        ),
        (
            {"registry_credentials": [{**NGC, "secret": "/aws/ngc"}]},
            f"{R}.registry_credentials[0].secret",
            "which SSM reserves",
        ),
        (
            {"registry_credentials": [{**PRIVATE, "secret": "arn:aws:s3:::bucket"}]},
            f"{R}.registry_credentials[0].secret",
            "Secrets Manager secret name",
        ),
        (
            {"registry_credentials": [{**NGC, "login": "x"}]},
            f"{R}.registry_credentials[0].login",
            "only used with kind stack",
        ),
        (
            {"registry_credentials": [{"registry": "nvcr.io", "kind": "stack", "secret": "ngc"}]},
            f"{R}.registry_credentials[0].login",
            "required with kind stack",
        ),
        (
            {"registry_credentials": [{"registry": "nvcr.io", "kind": "stack", "secret": "NGC-key", "login": "u"}]},
            f"{R}.registry_credentials[0].secret",
            "not a stack secret name",
        ),
        (
            {"registry_credentials": [{"registry": "nvcr.io", "kind": "stack", "secret": "ngc", "login": "a b"}]},
            f"{R}.registry_credentials[0].login",
            "splits on blanks",
        ),
        (
            {
                "registry_credentials": [
                    {"registry": "nvcr.io", "kind": "stack", "secret": "ngc", "login": "$oauthtoken"},
                    {"registry": "authn.nvidia.com", "kind": "stack", "secret": "ngc", "login": "other"},
                ]
            },
            f"{R}.registry_credentials[1].login",
            "one stack secret stores one login",
        ),
    ],
)
def test_bad_containers_config_names_the_path(containers, path, fragment):
    problems = _problems(containers)
    assert [p for p, _ in problems] == [path], problems
    assert fragment in problems[0][1], problems


def test_good_containers_config():
    cfg = parse_config(
        _raw(
            ecr=[ACCOUNT, OTHER, "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn"],
            registry_credentials=[NGC, PRIVATE],
        )
    )
    assert cfg.containers.enabled
    assert not parse_config(valid_raw()).containers.enabled
    assert parse_config(_raw(ecr=True)).containers.ecr is True


# --- what the node role may read -----------------------------------------------------------


def test_access_resolves_hosts_and_arns():
    c = ContainersConfig(
        ecr=[ACCOUNT, OTHER],
        registry_credentials=[
            NGC,
            PRIVATE,
            {
                **PRIVATE,
                "registry": "b.example.com",
                "secret": "arn:aws:secretsmanager:eu-west-1:210987654321:secret:b-AbCdEf",
            },
            {"registry": "authn.nvidia.com", "kind": "stack", "secret": "ngc", "login": "$oauthtoken"},
        ],
    )
    a = registry_access(c, REGION, ACCOUNT, "t1")
    assert a.ecr_hosts == (OWN, OTHER)
    assert a.ecr_repository_arns == (
        "arn:aws:ecr:eu-west-1:210987654321:repository/*",
        f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/*",
    )
    assert [(x.registry, x.kind, x.secret, x.region, x.arn) for x in a.credentials] == [
        ("nvcr.io", "ssm", "/gpu-cluster/ngc", REGION, f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/gpu-cluster/ngc"),
        (
            "registry.example.com:5000",
            "secretsmanager",
            "team/registry",
            REGION,
            f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:team/registry-??????",
        ),
        (
            "b.example.com",
            "secretsmanager",
            "arn:aws:secretsmanager:eu-west-1:210987654321:secret:b-AbCdEf",
            "eu-west-1",
            "arn:aws:secretsmanager:eu-west-1:210987654321:secret:b-AbCdEf",
        ),
        (
            "authn.nvidia.com",
            "ssm",
            "/gpu-cluster/t1/registry/ngc",
            REGION,
            f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/gpu-cluster/t1/registry/ngc",
        ),
    ]
    assert registry_access(ContainersConfig(), REGION, ACCOUNT, "t1") is None
    # China regions: their own partition and DNS suffix.
    cn = registry_access(ContainersConfig(ecr=True, registry_credentials=[NGC]), "cn-north-1", ACCOUNT, "t1")
    assert cn.ecr_hosts == (f"{ACCOUNT}.dkr.ecr.cn-north-1.amazonaws.com.cn",)
    assert cn.ecr_repository_arns == (f"arn:aws-cn:ecr:cn-north-1:{ACCOUNT}:repository/*",)
    assert cn.credentials[0].arn == f"arn:aws-cn:ssm:cn-north-1:{ACCOUNT}:parameter/gpu-cluster/ngc"


def _policy(run) -> list[dict]:
    return json.loads(run.inputs(ROLE_POLICY, "t1-registries")["policy"])["Statement"]


def test_role_policy_with_ecr_true_and_secrets():
    run = run_program(_raw(ecr=True, registry_credentials=[NGC, PRIVATE]))
    assert _policy(run) == [
        {"Sid": "EcrToken", "Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
        {
            "Sid": "EcrPull",
            "Effect": "Allow",
            "Action": ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
            "Resource": [f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/*"],
        },
        {
            "Sid": "RegistryParameters",
            "Effect": "Allow",
            "Action": "ssm:GetParameter",
            "Resource": [f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/gpu-cluster/ngc"],
        },
        {
            "Sid": "RegistrySecrets",
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": [f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:team/registry-??????"],
        },
    ]
    assert run.parent_type(ROLE_POLICY, "t1-registries") == "gpu-cluster:index:NodeIdentity"
    assert [c["token"] for c in run.calls].count("aws:index/getCallerIdentity:getCallerIdentity") == 1


def test_role_policy_with_a_list_of_hosts_needs_no_account_lookup():
    run = run_program(_raw(ecr=[OTHER, "111122223333.dkr.ecr.us-east-2.amazonaws.com"]))
    assert _policy(run) == [
        {"Sid": "EcrToken", "Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
        {
            "Sid": "EcrPull",
            "Effect": "Allow",
            "Action": ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
            "Resource": [
                "arn:aws:ecr:eu-west-1:210987654321:repository/*",
                "arn:aws:ecr:us-east-2:111122223333:repository/*",
            ],
        },
    ]
    assert "aws:index/getCallerIdentity:getCallerIdentity" not in [c["token"] for c in run.calls]


def test_without_containers_no_registry_statement_call_or_file():
    run = run_program(valid_raw())
    assert [r["name"] for r in run.of_type(ROLE_POLICY)] == [
        "t1-controller-block-ends",
        "t1-controller-logs",
        "t1-controller-metrics",
        "t1-controller-payload",
        "t1-controller-repair",
        "t1-controller-topology",
        "t1-logs",
        "t1-payload",
    ]
    assert run.of_type(PARAMETER) == []
    assert "aws:index/getCallerIdentity:getCallerIdentity" not in [c["token"] for c in run.calls]
    assert NEW_FILES.isdisjoint(run.node_files.files)
    assert b"REGISTRIES_CONF" not in run.node_files.files[layout.CLUSTER_ENV]


def test_policy_without_ecr_has_no_ecr_statement():
    access = registry_access(ContainersConfig(registry_credentials=[PRIVATE]), REGION, ACCOUNT, "t1")
    assert json.loads(registry_read_policy(access))["Statement"] == [
        {
            "Sid": "RegistrySecrets",
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": [f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:team/registry-??????"],
        }
    ]


# --- stack secrets -> SSM SecureString -----------------------------------------------------

STACK_NGC = [
    {"registry": "nvcr.io", "kind": "stack", "secret": "ngc", "login": "$oauthtoken"},
    {"registry": "authn.nvidia.com", "kind": "stack", "secret": "ngc", "login": "$oauthtoken"},
]
NGC_KEY = "gpu-cluster:registry_password_ngc"


def test_stack_secret_becomes_one_secure_parameter():
    run = run_program_with(_raw(registry_credentials=STACK_NGC), secrets={NGC_KEY: "s3cr3t-value"})
    params = run.of_type(PARAMETER)
    assert [p["name"] for p in params] == ["t1-registry-ngc"]
    assert params[0]["inputs"] == {
        "name": "/gpu-cluster/t1/registry/ngc",
        "type": "SecureString",
        "value": SECRET_SHOWN,
        "description": "gpu-cluster t1: registry login from stack secret ngc",
        "tags": {"GpuClusterName": "t1", "team": "ml"},
    }
    assert run.parent_type(PARAMETER, "t1-registry-ngc") == "gpu-cluster:index:RegistrySecrets"
    assert _policy(run) == [
        {
            "Sid": "RegistryParameters",
            "Effect": "Allow",
            "Action": "ssm:GetParameter",
            "Resource": [f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/gpu-cluster/t1/registry/ngc"],
        }
    ]
    conf = run.node_files.files[layout.REGISTRIES_CONF].decode().splitlines()[3:]
    assert conf == [
        f"ssm nvcr.io {REGION} /gpu-cluster/t1/registry/ngc",
        f"ssm authn.nvidia.com {REGION} /gpu-cluster/t1/registry/ngc",
    ]


def run_program_with(raw, secrets=None, extra_config=None):
    from offline.mocks import run_under_mocks
    from tests.support.mocks import Run

    mocks, urns, outputs, node_files = run_under_mocks(raw, REGION, secrets=secrets, extra_config=extra_config)
    return Run(mocks.resources, urns, outputs, node_files, calls=mocks.calls)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({}, f"{NGC_KEY} is not set; run `pulumi config set --secret {NGC_KEY}`"),
        ({"extra_config": {NGC_KEY: "plain"}}, f"{NGC_KEY} is stored in plain text in the stack file"),
    ],
)
def test_stack_secret_missing_or_in_plain_text_is_refused(kwargs, fragment):
    import pulumi

    with pytest.raises(pulumi.RunError) as err:
        run_program_with(_raw(registry_credentials=STACK_NGC), **kwargs)
    lines = str(err.value).splitlines()
    assert lines == [f"{R}.registry_credentials[0].secret: {lines[0].split(': ', 1)[1]}"]
    assert fragment in lines[0]


# --- node files ----------------------------------------------------------------------------


def test_rendered_files_only_with_containers():
    base = run_program(valid_raw()).node_files.files
    nf = run_program(_raw(ecr=True, registry_credentials=[NGC, PRIVATE])).node_files.files
    assert set(nf) - set(base) == NEW_FILES
    changed = sorted(p for p in base if base[p] != nf[p])
    assert changed == [layout.CLUSTER_ENV]
    added = nf[layout.CLUSTER_ENV].decode().splitlines()[len(base[layout.CLUSTER_ENV].decode().splitlines()) :]
    assert added == [
        "REGISTRIES_CONF=/etc/gpu-cluster/registries.conf",
        "ENROOT_CONFIG_DIR=/etc/enroot/config",
        "ENROOT_CREDENTIALS=/etc/enroot/config/.credentials",
        "ENROOT_CONF_DROPIN=/etc/enroot/enroot.conf.d/90-gpu-cluster-registries.conf",
    ]
    assert nf[layout.REGISTRIES_CONF].decode().splitlines()[3:] == [
        f"ecr {OWN} {REGION}",
        f"ssm nvcr.io {REGION} /gpu-cluster/ngc",
        f"secretsmanager registry.example.com:5000 {REGION} team/registry",
    ]


def _rendered_scripts() -> dict[str, bytes]:
    nf = run_program(_raw(ecr=True, registry_credentials=[NGC])).node_files.files
    return {p: nf[p] for p in (layout.REGISTRY_LOGIN, f"{layout.STEPS}/65-registries.sh")}


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck_registry_scripts(tmp_path, shellcheck_cache):
    # The sources, following `source` into the boot tree (nodeside/lib/common.sh) ...
    files = [
        str(REG_TEMPLATES / "bin" / "gpu-cluster-registry-login"),
        str(REG_TEMPLATES / "steps" / "65-registries.sh"),
    ]
    for r in shellcheck(["-x", "-s", "bash"], files, cwd=BOOT, cache=shellcheck_cache):
        assert r.returncode == 0, r.stdout
    # ... and the bytes the nodes get.
    paths = []
    for path, content in _rendered_scripts().items():
        f = tmp_path / path.strip("/").replace("/", "__")
        f.write_bytes(content)
        paths.append(str(f))
    for r in shellcheck(["-s", "bash", "-e", "SC1091"], paths, cache=shellcheck_cache):
        assert r.returncode == 0, r.stdout


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_service_and_timer_verify(tmp_path):
    nf = run_program(_raw(ecr=True)).node_files.files
    names = ["gpu-cluster-registry-login.service", "gpu-cluster-registry-login.timer"]
    for n in names:
        (tmp_path / n).write_bytes(nf[f"{layout.SYSTEMD_DIR}/{n}"])
    timer = nf[f"{layout.SYSTEMD_DIR}/gpu-cluster-registry-login.timer"].decode()
    assert "OnUnitActiveSec=6h" in timer and "WantedBy=timers.target" in timer
    r = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(str(tmp_path / n) for n in names)],
        capture_output=True,
        text=True,
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"},
    )
    problems = [
        ln
        for ln in (r.stdout + r.stderr).splitlines()
        if "gpu-cluster-registry-login" in ln and "is not executable" not in ln and "No such file" not in ln
    ]
    assert problems == [], r.stdout + r.stderr


# --- the login program against a stand-in aws ------------------------------------------------


def test_login_writes_enroot_credentials(tmp_path):
    node = Node(tmp_path, CONF, ANSWERS)
    r = node.login()
    assert r.returncode == 0, r.stderr
    assert node.creds.read_text().splitlines() == [
        f"machine {OWN} login AWS password {ECR_PASSWORD}",
        f"machine 111122223333.dkr.ecr.{REGION}.amazonaws.com login AWS password {ECR_PASSWORD}",
        f"machine {OTHER} login AWS password {ECR_PASSWORD}eu",
        f"machine nvcr.io login $oauthtoken password {NGC_KEY_VALUE}",
        f"machine authn.nvidia.com login $oauthtoken password {NGC_KEY_VALUE}",
        f"machine registry.example.com login robot password {PRIVATE_PASSWORD}",
    ]
    # Readable by the job's user (Pyxis runs enroot as that user); nothing else left behind.
    assert stat.S_IMODE(node.creds.stat().st_mode) == 0o644
    assert stat.S_IMODE(node.creds.parent.stat().st_mode) == 0o755
    assert [p.name for p in node.creds.parent.iterdir()] == [".credentials"]
    # One token per region; secrets only through --query output, never in argv.
    calls = node.calls.read_text().splitlines()
    assert calls == [
        f"ecr get-authorization-token --region {REGION} --query authorizationData[0].authorizationToken --output text",
        "ecr get-authorization-token --region eu-west-1 --query authorizationData[0].authorizationToken --output text",
        f"ssm get-parameter --region {REGION} --name /gpu-cluster/ngc --with-decryption --query Parameter.Value --output text",
        f"ssm get-parameter --region {REGION} --name /gpu-cluster/ngc --with-decryption --query Parameter.Value --output text",
        f"secretsmanager get-secret-value --region {REGION} --secret-id team/registry --query SecretString --output text",
    ]
    out = r.stdout + r.stderr
    assert f"wrote 6 login(s) to {node.creds}" in out
    for s in SECRETS:
        assert s not in out and s not in node.calls.read_text()


@pytest.mark.parametrize(
    "answer, fragment",
    [
        ("not json " + NGC_KEY_VALUE, 'is not JSON {"login": "...", "password": "..."}'),
        (json.dumps({"login": "$oauthtoken"}), 'is not JSON {"login": "...", "password": "..."}'),
        (json.dumps({"login": "$oauthtoken", "password": "$(id)" + NGC_KEY_VALUE}), "Enroot would run it as a command"),
        (json.dumps({"login": "u", "password": "two " + NGC_KEY_VALUE}), "has a blank"),
    ],
)
def test_bad_secret_fails_without_showing_it_and_keeps_the_old_file(tmp_path, answer, fragment):
    node = Node(tmp_path, [f"ssm nvcr.io {REGION} /gpu-cluster/ngc"], {f"ssm {REGION} /gpu-cluster/ngc": answer})
    node.creds.parent.mkdir(parents=True)
    node.creds.write_text("machine nvcr.io login old password old\n")
    r = node.login()
    assert r.returncode == 1
    assert "ERROR: ssm secret /gpu-cluster/ngc " in r.stderr and fragment in r.stderr and "(for nvcr.io)" in r.stderr
    assert NGC_KEY_VALUE not in r.stdout + r.stderr
    assert node.creds.read_text() == "machine nvcr.io login old password old\n"
    assert [p.name for p in node.creds.parent.iterdir()] == [".credentials"]


def test_unreadable_token_or_secret_names_the_permission(tmp_path):
    node = Node(tmp_path, [f"ecr {OWN} {REGION}"], {})
    r = node.login()
    assert r.returncode == 1
    assert f"cannot get an ECR token in {REGION} for {OWN} (node role: ecr:GetAuthorizationToken)" in r.stderr
    node = Node(tmp_path / "b", [f"secretsmanager r.example.com {REGION} team/x"], {})
    r = node.login()
    assert "cannot read secret team/x in us-east-2 for r.example.com" in r.stderr
    assert "secretsmanager:GetSecretValue" in r.stderr
    assert not node.creds.exists()


# --- step 65 under the entry point, with a stand-in systemctl ------------------------------


def test_step_65_configures_enroot_and_the_timer(tmp_path):
    node, r, calls = _step_box(tmp_path, "systemd")
    assert r.returncode == 0, r.stdout + r.stderr
    dropin = node.enroot / "enroot.conf.d" / "90-gpu-cluster-registries.conf"
    assert dropin.read_text().splitlines()[1:] == [f"ENROOT_CONFIG_PATH {node.enroot}/config"]
    assert len(node.creds.read_text().splitlines()) == 6
    assert calls.read_text().splitlines() == [
        "daemon-reload",
        "SKIP_SYSV is-enabled --quiet gpu-cluster-registry-login.timer",
        "SKIP_SYSV enable --quiet --no-reload gpu-cluster-registry-login.timer",
        "--no-block start gpu-cluster-registry-login.timer",
        "is-active --quiet gpu-cluster-registry-login.timer",
    ]
    log = (tmp_path / "log" / "boot.log").read_text()
    assert "end 65-registries ok" in log and "wrote 6 login(s)" in log
    status = (tmp_path / "state" / "status").read_text()
    for s in SECRETS:
        assert s not in log and s not in r.stdout + r.stderr and s not in status


def test_step_65_direct_mode_says_the_timer_is_skipped(tmp_path):
    node, r, calls = _step_box(tmp_path, "direct")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not calls.exists()
    st = json.loads((tmp_path / "state" / "status").read_text())
    assert "65-registries: skipped: registry login refresh timer" in st["skipped"]


def test_step_65_failure_is_reported_without_the_secret(tmp_path):
    bad = {**ANSWERS, f"ssm {REGION} /gpu-cluster/ngc": json.dumps({"login": "u", "password": "$" + NGC_KEY_VALUE})}
    _, r, calls = _step_box(tmp_path, "systemd", answers=bad)
    assert r.returncode == 1
    st = json.loads((tmp_path / "state" / "status").read_text())
    assert (st["step"], st["state"]) == ("65-registries", "failed")
    assert st["reason"].startswith("cannot write the registry logins")
    log = (tmp_path / "log" / "boot.log").read_text()
    assert "ssm secret /gpu-cluster/ngc has a blank in its login or password, or a password starting with '$'" in log
    assert NGC_KEY_VALUE not in log + r.stdout + r.stderr + json.dumps(st)
    assert not calls.exists()  # no timer for a node whose logins failed
