"""Node extension points (issue 12, item 4): extra IAM for the node role (`node_iam`)
and the stack's own last boot step (`hooks.on_node_ready`).

- config: every invalid value is one `path: message` line with the fix; broad grants
  are allowed but warned about;
- IAM: the exact resources and policy documents under the plan's mocks, with and
  without node_iam;
- payload: the hook and its step travel only when configured, with mode 0755; stacks
  without a hook get the bytes they got before (the goldens stay as they are);
- boot: the shipped step 99 run by the real entry point in a sandbox: success writes
  its marker and log, a failing hook stops the boot naming the step, the reason and the
  hook's log, a hanging hook is killed at its timeout.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pulumi
import pytest

from infra.iam import NodeIdentity, NodeIdentityArgs, attachment_names, object_read_policy
from model.catalog import CATALOG
from model.config import parse_config
from model.config_warnings import node_iam_warnings
from model.errors import ConfigError
from model.hooks import MAX_HOOK_BYTES
from model.node_iam import (
    IAM_ROLE_INLINE_POLICY_CHARS,
    MAX_NODE_IAM_STATEMENT_CHARS,
    PROGRAM_INLINE_POLICY_RESERVE,
    SSM_CORE_POLICY_ARN,
    iam_policy_chars,
    program_managed_policy_arns,
)
from tests.support.hook_box import STEP, HookBox
from tests.support.mocks import run_component, run_program, stack_config, valid_raw
from userdata import layout
from userdata.render import FsxEndpoint, render_userdata

R = "gpu-cluster:cluster"
ROLE = "aws:iam/role:Role"
ATTACH = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
POLICY = "aws:iam/rolePolicy:RolePolicy"
PROFILE = "aws:iam/instanceProfile:InstanceProfile"
CW = "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy"
MINE = "arn:aws:iam::123456789012:policy/team/TrainingDataRead"
HOOK = "#!/bin/bash\nset -eu\necho ready on $NODE_NAME\n"
FSX = FsxEndpoint(dns_name="fs-0123456789abcdef0.fsx.us-east-2.amazonaws.com", mount_name="abcdefgh")
URI = "s3://demo-bucket/payload/{sha256}.tar.gz"
FAILURES = Path(__file__).resolve().parents[2] / "nodeside/lib/boot-failures.sh"


def _raw(**sections):
    raw = valid_raw()
    raw.update(sections)
    return raw


def _problems(raw, base_dir=None) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as exc:
        parse_config(raw, base_dir=base_dir)
    return exc.value.problems


def _stmt(**kw):
    return {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/*", **kw}


# --- config: node_iam ----------------------------------------------------------------

NODE_IAM_INVALID = [
    (
        "arn-shape",
        {"managed_policy_arns": ["arn:aws:iam:aws:policy/X"]},
        f"{R}.node_iam.managed_policy_arns[0]",
        "'arn:aws:iam:aws:policy/X' is not an IAM managed policy ARN; use 'arn:aws:iam::aws:policy/NAME'",
    ),
    (
        "arn-partition",
        {"managed_policy_arns": ["arn:aws-eu:iam::aws:policy/X"]},
        f"{R}.node_iam.managed_policy_arns[0]",
        "partition aws, aws-cn or aws-us-gov",
    ),
    (
        "arn-not-a-policy",
        {"managed_policy_arns": ["arn:aws:iam::123456789012:role/X"]},
        f"{R}.node_iam.managed_policy_arns[0]",
        "is not an IAM managed policy ARN",
    ),
    (
        "arn-duplicate",
        {"managed_policy_arns": [CW, MINE, CW]},
        f"{R}.node_iam.managed_policy_arns",
        f"{CW} is listed twice (items 0 and 2); list each policy once",
    ),
    (
        "arn-program-own",
        {"managed_policy_arns": [SSM_CORE_POLICY_ARN]},
        f"{R}.node_iam.managed_policy_arns",
        f"{SSM_CORE_POLICY_ARN} (item 0) is attached to the node role already; remove it",
    ),
    (
        "arn-mixed-partitions",
        {"managed_policy_arns": [CW, "arn:aws-cn:iam::aws:policy/Y"]},
        f"{R}.node_iam.managed_policy_arns",
        "the ARNs name partitions aws, aws-cn; a role lives in one partition",
    ),
    (
        "arn-too-many",
        {"managed_policy_arns": [f"arn:aws:iam::123456789012:policy/P{i}" for i in range(10)]},
        f"{R}.node_iam.managed_policy_arns",
        "10 policies, but IAM attaches at most 10 managed policies to a role by default and the program attaches 1; use at most 9",
    ),
    (
        "action-star",
        {"statements": [_stmt(Action="*", Resource="*")]},
        f"{R}.node_iam.statements[0].Action",
        "'*' is every action of every service: every job on the nodes would be an administrator",
    ),
    (
        "action-star-star-in-list",
        {"statements": [_stmt(Action=["s3:GetObject", "*:*"])]},
        f"{R}.node_iam.statements[0].Action",
        "'*:*' is every action of every service",
    ),
    (
        "deny-star",
        {"statements": [_stmt(Effect="Deny", Action="*", Resource="*")]},
        f"{R}.node_iam.statements[0].Action",
        "'*' denies every action, the node's own SSM access and payload read included: no node could boot",
    ),
    (
        "action-shape",
        {"statements": [_stmt(Action="GetObject")]},
        f"{R}.node_iam.statements[0].Action",
        "'GetObject' is not an IAM action; write 'service:Action'",
    ),
    ("action-empty", {"statements": [_stmt(Action=[])]}, f"{R}.node_iam.statements[0].Action", "empty"),
    (
        "resource-shape",
        {"statements": [_stmt(Resource="my-bucket")]},
        f"{R}.node_iam.statements[0].Resource",
        "'my-bucket' is not an ARN; write arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE",
    ),
    (
        "effect",
        {"statements": [_stmt(Effect="allow")]},
        f"{R}.node_iam.statements[0].Effect",
        "Input should be 'Allow' or 'Deny' (got \"allow\")",
    ),
    (
        "sid-shape",
        {"statements": [_stmt(Sid="read-data")]},
        f"{R}.node_iam.statements[0].Sid",
        "'read-data' is not a valid Sid; IAM takes letters and digits only",
    ),
    (
        "sid-duplicate",
        {"statements": [_stmt(Sid="Read"), _stmt(Sid="Read")]},
        f"{R}.node_iam.statements",
        "Sid Read is used more than once",
    ),
    (
        "principal",
        {"statements": [_stmt(Principal="*")]},
        f"{R}.node_iam.statements[0].Principal",
        "unknown key",
    ),
    (
        "not-action",
        {"statements": [{"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}]},
        f"{R}.node_iam.statements[0].NotAction",
        "unknown key",
    ),
    ("unknown-key", {"policies": []}, f"{R}.node_iam.policies", "unknown key"),
]


@pytest.mark.parametrize("case,node_iam,path,message", NODE_IAM_INVALID, ids=[c[0] for c in NODE_IAM_INVALID])
def test_node_iam_invalid(case, node_iam, path, message):
    problems = _problems(_raw(node_iam=node_iam))
    hits = [m for p, m in problems if p == path]
    assert hits, problems
    assert message in hits[0]


def _statements_of_size(target: int) -> list[dict]:
    """Statements whose policy document IAM counts as exactly `target` characters."""
    base = [_stmt(Resource=f"arn:aws:s3:::bucket-{i:04d}/*") for i in range(60)]
    doc = {"Version": "2012-10-17", "Statement": base}
    pad = target - iam_policy_chars(doc)
    assert pad > 0
    base[0]["Resource"] = base[0]["Resource"][:-2] + "x" * pad + "/*"
    return base


def test_statements_size_limit_at_the_boundary():
    ok = parse_config(_raw(node_iam={"statements": _statements_of_size(MAX_NODE_IAM_STATEMENT_CHARS)}))
    assert len(ok.node_iam.statements) == 60
    problems = _problems(_raw(node_iam={"statements": _statements_of_size(MAX_NODE_IAM_STATEMENT_CHARS + 1)}))
    assert problems == [
        (
            f"{R}.node_iam.statements",
            f"the statements come to {MAX_NODE_IAM_STATEMENT_CHARS + 1} characters (white space not counted); "
            f"IAM takes at most 10240 for all inline policies of a role and the program keeps "
            f"{PROGRAM_INLINE_POLICY_RESERVE} for its own, so stay within {MAX_NODE_IAM_STATEMENT_CHARS}: merge "
            "statements or move them into a customer managed policy (node_iam.managed_policy_arns)",
        )
    ]


def test_reserve_covers_the_programs_own_inline_policy():
    # The program's own inline policies at their longest, on the role that carries the
    # most (the controller's: the payload read and the block-ends read), with a
    # 63-character bucket name [S3-NAMES] and the content-addressed key. Together with
    # the largest statements we accept, the role stays within IAM's aggregate inline limit.
    bucket = "b" * 63
    own = sum(
        iam_policy_chars(json.loads(object_read_policy(arn)))
        for arn in (f"arn:aws:s3:::{bucket}/payload/{'0' * 64}.tar.gz", f"arn:aws:s3:::{bucket}/blocks/ends.json")
    )
    assert own < PROGRAM_INLINE_POLICY_RESERVE
    assert own + MAX_NODE_IAM_STATEMENT_CHARS <= IAM_ROLE_INLINE_POLICY_CHARS


def test_most_managed_policies_accepted():
    arns = [f"arn:aws:iam::123456789012:policy/P{i}" for i in range(9)]  # 10 by default, less SSM core
    cfg = parse_config(_raw(node_iam={"managed_policy_arns": arns}))
    assert cfg.node_iam.managed_policy_arns == tuple(arns)
    assert program_managed_policy_arns() == (SSM_CORE_POLICY_ARN,)


def test_program_attaches_exactly_its_declared_policies():
    # The quota check counts program_managed_policy_arns; the role must attach just those.
    run = run_program(valid_raw())
    for role in ("t1-role", "t1-controller-role"):  # the workers' role and the controller's
        own = [r["inputs"]["policyArn"] for r in run.of_type(ATTACH) if r["inputs"]["role"].startswith(role)]
        assert tuple(own) == program_managed_policy_arns(), role


def test_broad_grants_are_warned_not_refused():
    cfg = parse_config(
        _raw(
            node_iam={
                "statements": [
                    _stmt(Action="s3:*", Resource="*"),
                    _stmt(Action=["iam:PassRole", "s3:GetObject"], Resource="*"),
                    _stmt(Action="iam:GetRole", Resource="arn:aws:iam::123456789012:role/x"),
                    _stmt(Effect="Deny", Action="ec2:*", Resource="*"),
                ]
            }
        )
    )
    assert node_iam_warnings(cfg) == [
        (f"{R}.node_iam.statements[0].Action", "s3:* allows every action of the service to every job on the nodes"),
        (
            f"{R}.node_iam.statements[1].Action",
            "iam:PassRole on Resource '*': IAM and STS rights on every role can escalate to admin",
        ),
    ]
    assert node_iam_warnings(parse_config(valid_raw())) == []


# --- config: hooks -------------------------------------------------------------------


def _hook_problems(hook: dict, base_dir: Path) -> list[tuple[str, str]]:
    return _problems(_raw(hooks={"on_node_ready": hook}), base_dir=base_dir)


def test_hook_path_is_read_relative_to_the_project(tmp_path):
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "ready.sh").write_text(HOOK)
    cfg = parse_config(_raw(hooks={"on_node_ready": {"path": "hooks/ready.sh"}}), base_dir=tmp_path)
    hook = cfg.hooks.on_node_ready
    assert (hook.path, hook.script, hook.text, hook.timeout_minutes, hook.run_on) == (
        "hooks/ready.sh",
        None,
        HOOK,
        10,
        "all",
    )
    inline = parse_config(_raw(hooks={"on_node_ready": {"script": HOOK, "run_on": "workers", "timeout_minutes": 3}}))
    assert (inline.hooks.on_node_ready.text, inline.hooks.on_node_ready.run_on) == (HOOK, "workers")


def test_hook_invalid(tmp_path):
    p = f"{R}.hooks.on_node_ready"
    (tmp_path / "plain.sh").write_text("echo no shebang\n")
    (tmp_path / "big.sh").write_bytes(b"#!/bin/sh\n" + b"#" * MAX_HOOK_BYTES)
    (tmp_path / "bin.sh").write_bytes(b"#!/bin/sh\n\xff\xfe")
    (tmp_path / "dir.sh").mkdir()
    cases = [
        ({"path": "missing.sh"}, f"{p}.path", f"{tmp_path}/missing.sh does not exist or is not a file"),
        ({"path": "dir.sh"}, f"{p}.path", "does not exist or is not a file"),
        ({"path": "/etc/passwd"}, f"{p}.path", "must be a relative path inside the project"),
        ({"path": "../outside.sh"}, f"{p}.path", "without '..'"),
        ({"path": "plain.sh"}, f"{p}.path", "does not start with '#!'"),
        ({"path": "big.sh"}, f"{p}.path", f"is {MAX_HOOK_BYTES + 10} bytes, over the {MAX_HOOK_BYTES} a hook may have"),
        ({"path": "bin.sh"}, f"{p}.path", "is not UTF-8 text"),
        ({"script": "echo hi"}, f"{p}.script", "the inline script does not start with '#!'"),
        ({}, p, "set exactly one of path (a script file in the project) or script (the text inline)"),
        ({"script": HOOK, "path": "x.sh"}, f"{p}.path", "does not exist"),
        ({"script": HOOK, "timeout_minutes": 0}, f"{p}.timeout_minutes", "greater than or equal to 1"),
        ({"script": HOOK, "timeout_minutes": 121}, f"{p}.timeout_minutes", "less than or equal to 120"),
        ({"script": HOOK, "run_on": "gpu"}, f"{p}.run_on", "'all', 'controller' or 'workers' (got \"gpu\")"),
        ({"script": HOOK, "when": "later"}, f"{p}.when", "unknown key"),
    ]
    for hook, path, message in cases:
        problems = _hook_problems(hook, tmp_path)
        assert [m for q, m in problems if q == path and message in m], (hook, problems)
    (tmp_path / "x.sh").write_text(HOOK)
    assert _hook_problems({"script": HOOK, "path": "x.sh"}, tmp_path) == [
        (p, "set exactly one of path (a script file in the project) or script (the text inline)")
    ]


def test_every_problem_at_once(tmp_path):
    raw = _raw(
        node_iam={"managed_policy_arns": ["nope"], "statements": [_stmt(Action="*")]},
        hooks={"on_node_ready": {"path": "missing.sh"}},
    )
    raw["capacity"]["nodes"] = 3  # a meaning error in another section
    paths = [p for p, _ in _problems(raw, base_dir=tmp_path)]
    assert paths == [
        f"{R}.node_iam.managed_policy_arns[0]",
        f"{R}.node_iam.statements[0].Action",
        f"{R}.hooks.on_node_ready.path",
        f"{R}.capacity.nodes",
    ]


# --- IAM resources under the plan's mocks ---------------------------------------------


def _identity(**extra):
    def program():
        ident = NodeIdentity("c1", NodeIdentityArgs(cluster_name="c1", tags={"GpuClusterName": "c1"}, **extra))
        return pulumi.Output.all(ident.role_name, ident.instance_profile_name)

    return run_component(program)


def test_identity_without_node_iam_is_unchanged():
    run = _identity()
    assert run.custom() == [(PROFILE, "c1-profile"), (ROLE, "c1-role"), (ATTACH, "c1-ssm")]


def test_identity_with_node_iam():
    doc = json.dumps({"Version": "2012-10-17", "Statement": [_stmt()]}, sort_keys=True)
    run = _identity(managed_policy_arns=(CW, MINE), extra_policy=doc)
    assert run.custom() == [
        (PROFILE, "c1-profile"),
        (ROLE, "c1-role"),
        (POLICY, "c1-node-iam"),
        (ATTACH, "c1-policy-CloudWatchAgentServerPolicy"),
        (ATTACH, "c1-policy-TrainingDataRead"),
        (ATTACH, "c1-ssm"),
    ]
    role_name, _ = run.value
    assert run.inputs(ATTACH, "c1-policy-CloudWatchAgentServerPolicy") == {"role": role_name, "policyArn": CW}
    assert run.inputs(ATTACH, "c1-policy-TrainingDataRead") == {"role": role_name, "policyArn": MINE}
    assert run.inputs(POLICY, "c1-node-iam") == {"role": role_name, "policy": doc}
    for typ, name in run.custom():
        assert run.parent_type(typ, name) == "gpu-cluster:index:NodeIdentity"


def test_attachment_names_stable_and_distinct():
    other = "arn:aws:iam::210987654321:policy/TrainingDataRead"
    assert attachment_names("c1", (MINE, CW)) == attachment_names("c1", (CW, MINE))
    names = attachment_names("c1", (MINE, other))
    assert len(set(names.values())) == 2
    assert all(
        n.startswith("c1-policy-TrainingDataRead-") and len(n) == len("c1-policy-TrainingDataRead-") + 8
        for n in names.values()
    )


def test_program_renders_node_iam():
    statements = [_stmt(Sid="ReadData", Resource=["arn:aws:s3:::data", "arn:aws:s3:::data/*"])]
    statements.append(
        {
            "Effect": "Deny",
            "Action": "s3:DeleteObject",
            "Resource": "*",
            "Condition": {"Bool": {"aws:ViaAWSService": "false"}},
        }
    )
    run = run_program(_raw(node_iam={"managed_policy_arns": [CW], "statements": statements}))
    plain = {(t, n) for t, n in run_program(valid_raw()).custom()}
    # node_iam is today's node grant, so the controller's own role carries it too
    assert set(run.custom()) - plain == {
        (ATTACH, "t1-policy-CloudWatchAgentServerPolicy"),
        (POLICY, "t1-node-iam"),
        (ATTACH, "t1-controller-policy-CloudWatchAgentServerPolicy"),
        (POLICY, "t1-controller-node-iam"),
    }
    assert run.inputs(POLICY, "t1-controller-node-iam")["policy"] == run.inputs(POLICY, "t1-node-iam")["policy"]
    assert json.loads(run.inputs(POLICY, "t1-node-iam")["policy"]) == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReadData",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": ["arn:aws:s3:::data", "arn:aws:s3:::data/*"],
            },
            {
                "Effect": "Deny",
                "Action": "s3:DeleteObject",
                "Resource": "*",
                "Condition": {"Bool": {"aws:ViaAWSService": "false"}},
            },
        ],
    }
    assert run.inputs(ATTACH, "t1-policy-CloudWatchAgentServerPolicy")["policyArn"] == CW


# --- the payload ---------------------------------------------------------------------


def _render(raw, base_dir=None):
    cfg = parse_config(raw, base_dir=base_dir)
    return render_userdata(cfg, CATALOG[cfg.instance_type], FSX, URI)


def _members(tar: bytes) -> dict[str, tuple[bytes, int]]:
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        return {"/" + m.name: (t.extractfile(m).read(), m.mode) for m in t.getmembers()}


def _env(text: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.decode().splitlines() if line and not line.startswith("#"))


def test_hook_travels_in_the_payload_only_when_configured(tmp_path):
    (tmp_path / "ready.sh").write_text(HOOK)
    (tmp_path / "ready.sh").chmod(0o644)  # the payload sets the mode, not the checkout
    plain = _render(valid_raw())
    hooked = _render(
        _raw(hooks={"on_node_ready": {"path": "ready.sh", "timeout_minutes": 7, "run_on": "controller"}}), tmp_path
    )
    added = set(hooked.files) - set(plain.files)
    assert added == {layout.ON_NODE_READY, layout.ON_NODE_READY_STEP}
    members = _members(hooked.s3_payload[1])
    assert members[layout.ON_NODE_READY] == (HOOK.encode(), 0o755)
    assert members[layout.ON_NODE_READY_STEP] == (STEP.read_bytes(), 0o755)
    assert not any(p.startswith((layout.HOOKS, layout.ON_NODE_READY_STEP)) for p in _members(plain.s3_payload[1]))
    # Not in the user data itself (EC2's 16 KB): only in the payload.
    assert HOOK.encode() not in gzip.decompress(hooked.user_data)
    env_plain, env_hooked = _env(plain.files[layout.CLUSTER_ENV]), _env(hooked.files[layout.CLUSTER_ENV])
    assert {k: v for k, v in env_hooked.items() if k not in env_plain} == {
        "ON_NODE_READY_SCRIPT": "/opt/gpu-cluster/hooks/on-node-ready",
        "ON_NODE_READY_LOG": "/var/log/gpu-cluster/on-node-ready.log",
        "ON_NODE_READY_STATUS": "/var/lib/gpu-cluster/on-node-ready.json",
        "ON_NODE_READY_MARKERS": "/fsx/.gpu-cluster/t1/hooks/on-node-ready",
        "ON_NODE_READY_TIMEOUT": "420",
        "ON_NODE_READY_RUN_ON": "controller",
    }
    assert all(k in env_hooked and env_hooked[k] == v for k, v in env_plain.items())


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_stacks_without_hooks_ship_no_hook(stack):
    raw, _ = stack_config(stack)
    assert "hooks" not in raw and "node_iam" not in raw
    nf = _render(raw)
    assert layout.ON_NODE_READY_STEP not in nf.files and not any(p.startswith(layout.HOOKS) for p in nf.files)
    assert b"ON_NODE_READY" not in nf.files[layout.CLUSTER_ENV]


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck_rendered_hook_step(tmp_path):
    nf = _render(_raw(hooks={"on_node_ready": {"script": HOOK}}))
    for path, content in nf.files.items():  # the node's tree, so `source` directives resolve
        dest = tmp_path / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(content)
    step = tmp_path / layout.ON_NODE_READY_STEP.lstrip("/")
    r = subprocess.run(["shellcheck", "-x", "-s", "bash", str(step)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


# --- the boot: step 99 run by the real entry point ------------------------------------


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z")


def test_hook_success_writes_its_marker_and_log(tmp_path):
    box = HookBox(tmp_path)
    box.hook(f'env | sort >"{tmp_path}/hook.env"; echo "ready on $NODE_NAME"')
    r = box.boot()
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.trace() == ["10-identity"]  # fake steps trace; step 99 is the shipped one
    st = box.status()
    assert (st["step"], st["state"], st["reason"]) == ("99-on-node-ready", "ok", "all 2 step(s) ok")
    m = box.hook_marker()
    assert {k: m[k] for k in ("hook", "node", "state", "exit_status", "timeout_seconds", "log")} == {
        "hook": "on_node_ready",
        "node": "ip-10-0-0-5",
        "state": "ok",
        "exit_status": 0,
        "timeout_seconds": 30,
        "log": str(box.hook_log),
    }
    log = box.hook_log.read_text().splitlines()
    assert log[0].endswith(": hooks.on_node_ready on ip-10-0-0-5 (worker), timeout 30s") and log[1:] == [
        "ready on ip-10-0-0-5"
    ]
    boot_log = (box.log_dir / "boot.log").read_text()
    assert "hooks.on_node_ready ok after" in boot_log and "ready on ip-10-0-0-5" not in boot_log
    env = dict(line.split("=", 1) for line in (tmp_path / "hook.env").read_text().splitlines())
    assert {k: env[k] for k in ("CLUSTER_NAME", "NODE_NAME", "NODE_ROLE", "NODE_ADDR", "INSTANCE_ID")} == {
        "CLUSTER_NAME": "demo",
        "NODE_NAME": "ip-10-0-0-5",
        "NODE_ROLE": "worker",
        "NODE_ADDR": "10.0.0.5",
        "INSTANCE_ID": "i-0abc",
    }
    assert (env["CONTROLLER_HOST"], env["CONTROLLER_ADDR"], env["FSX_MOUNTPOINT"]) == (
        "ip-10-0-0-4",
        "10.0.0.4",
        str(box.fsx),
    )
    assert (env["INSTANCE_TYPE"], env["SLURM_PARTITION"]) == ("p5.48xlarge", "train")
    # A clean environment: the contract's variables, not the boot's internals.
    assert not [k for k in env if k.startswith(("GPU_CLUSTER", "ON_NODE_READY", "BOOT_", "GC_", "FROM_"))]
    # Every boot runs it again (it must converge): a second header, a second line.
    assert box.boot().returncode == 0
    assert box.hook_log.read_text().splitlines().count("ready on ip-10-0-0-5") == 2


def test_failing_hook_stops_the_boot_naming_step_reason_and_log(tmp_path):
    box = HookBox(tmp_path)
    box.hook('echo "pulling the site agent"; echo "agent: license server unreachable" >&2; exit 3')
    r = box.boot()
    assert r.returncode == 1
    st = box.status()
    assert (st["step"], st["state"]) == ("99-on-node-ready", "failed")
    assert st["reason"].startswith(
        f"hooks.on_node_ready exited with status 3 after 0s (its log: {box.hook_log}); "
        "last line: agent: license server unreachable (see "
    )
    assert st["log"] == str(box.log_dir / "boot.log")
    m = box.hook_marker()
    assert (m["state"], m["exit_status"]) == ("failed", 3)
    boot_log = (box.log_dir / "boot.log").read_text()
    assert "FAILED 99-on-node-ready" in boot_log and "agent: license server unreachable" in boot_log
    # What the controller's agent puts in Slurm for this marker (lib/boot-failures.sh).
    text = subprocess.run(
        ["bash", "-c", f'. "{FAILURES}"; boot_failure_reason "$1" "$2" "$3"', "x", st["step"], st["reason"], st["log"]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert (
        text
        == (
            f"boot failed at 99-on-node-ready: hooks.on_node_ready exited with status 3 after 0s (its log: {box.hook_log}); "
            f"last line: agent: license server unreachable; log {box.log_dir}/boot.log"
        )[:250]
    )


def test_hanging_hook_is_killed_at_its_timeout(tmp_path):
    box = HookBox(tmp_path, timeout=1)
    box.hook(f'sleep 300 & echo $! >"{tmp_path}/child"; echo $$ >"{tmp_path}/hook.pid"; echo started; wait')
    start = time.monotonic()
    r = box.boot()
    took = time.monotonic() - start
    assert r.returncode == 1
    assert 1 <= took < 20
    st = box.status()
    assert (st["step"], st["state"]) == ("99-on-node-ready", "failed")
    assert st["reason"].startswith(
        f"hooks.on_node_ready timed out after 1s and was killed (its log: {box.hook_log}); last line: started"
    )
    assert box.hook_marker()["state"] == "timeout"
    for name in ("hook.pid", "child"):  # the hook and what it started are gone
        assert _gone(int((tmp_path / name).read_text())), name


def test_hook_ignoring_term_is_killed(tmp_path):
    box = HookBox(tmp_path, timeout=1)
    box.hook(f"trap '' TERM; echo $$ >\"{tmp_path}/hook.pid\"; sleep 300")
    r = box.boot(ON_NODE_READY_KILL_AFTER="0.2")  # timeout(1) takes fractions
    assert r.returncode == 1
    assert box.status()["reason"].startswith("hooks.on_node_ready timed out after 1s and was killed")
    assert box.hook_marker()["exit_status"] == 137
    assert _gone(int((tmp_path / "hook.pid").read_text()))


def test_daemon_left_by_the_hook_does_not_stall_the_boot(tmp_path):
    box = HookBox(tmp_path)
    # A daemon that keeps the hook's stdout: on the boot's pipe it would hold tee open.
    box.hook(f'setsid sleep 30 & echo $! >"{tmp_path}/daemon"; echo started the agent')
    start = time.monotonic()
    try:
        r = box.boot()
        assert r.returncode == 0, r.stdout + r.stderr
        assert time.monotonic() - start < 15
    finally:
        subprocess.run(["kill", (tmp_path / "daemon").read_text().strip()], check=False)


@pytest.mark.parametrize(
    "role,run_on,runs",
    [
        ("worker", "controller", False),
        ("controller", "workers", False),
        ("controller", "controller", True),
        ("worker", "workers", True),
    ],
)
def test_run_on(tmp_path, role, run_on, runs):
    box = HookBox(tmp_path, role=role, run_on=run_on)
    box.hook(f'touch "{tmp_path}/ran"')
    r = box.boot()
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "ran").exists() == runs
    assert box.status()["state"] == "ok"
    if not runs:
        assert not box.hook_status.exists()
        assert (
            f"hooks.on_node_ready runs on {'the controller only' if run_on == 'controller' else 'workers only'}"
            in r.stdout
        )


def test_only_reruns_the_hook(tmp_path):
    box = HookBox(tmp_path)
    box.hook("echo again")
    assert box.boot().returncode == 0
    (tmp_path / "trace").write_text("")
    assert box.boot("--only", "on-node-ready").returncode == 0
    assert box.trace() == []  # step 10 did not run again
    assert box.hook_log.read_text().splitlines().count("again") == 2


# --- where a hook path is read from ---------------------------------------------------


def test_program_reads_the_hook_from_the_project_dir(tmp_path, monkeypatch):
    import infra.stack

    assert (infra.stack.PROJECT_DIR / "Pulumi.yaml").is_file()  # where Pulumi runs the program
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "ready.sh").write_text(HOOK)
    monkeypatch.setattr(infra.stack, "PROJECT_DIR", tmp_path)
    run = run_program(_raw(hooks={"on_node_ready": {"path": "hooks/ready.sh"}}))
    assert run.node_files.files[layout.ON_NODE_READY] == HOOK.encode()
    assert layout.ON_NODE_READY_STEP in run.node_files.files


def test_ops_reads_the_hook_beside_the_stack_file(tmp_path):
    import yaml

    from ops.stack import load_stack

    raw = _raw(hooks={"on_node_ready": {"path": "ready.sh"}})
    (tmp_path / "Pulumi.lab.yaml").write_text(yaml.safe_dump({"config": {"aws:region": "us-east-2", f"{R}": raw}}))
    with pytest.raises(ConfigError) as exc:
        load_stack("lab", root=tmp_path)
    assert exc.value.problems == [
        (
            f"{R}.hooks.on_node_ready.path",
            f"{tmp_path}/ready.sh does not exist or is not a file; the path is relative to {tmp_path}",
        )
    ]
    (tmp_path / "ready.sh").write_text(HOOK)
    assert load_stack("lab", root=tmp_path).config.hooks.on_node_ready.text == HOOK


def test_config_reference_names_the_new_keys_plainly():
    from model.config_doc import reference_table

    table = reference_table()
    assert f"| `{R}.node_iam.managed_policy_arns` | list of str | none |" in table
    assert f"| `{R}.hooks.on_node_ready.path` | str (optional) | none |" in table


def test_program_logs_broad_grants_as_warnings(monkeypatch):
    said: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: said.append(msg))
    run_program(_raw(node_iam={"statements": [_stmt(Action="s3:*", Resource="*")]}))
    assert (
        f"{R}.node_iam.statements[0].Action: s3:* allows every action of the service to every job on the nodes" in said
    )
    said.clear()
    run_program(valid_raw())
    assert not [m for m in said if "node_iam" in m]
