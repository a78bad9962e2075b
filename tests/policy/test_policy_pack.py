"""policy/: the invariants on the plans of the shipped stacks (every rule passes), on
deliberately broken copies (each rule fails with its message), through pulumi-policy's
own argument types, and through the pack served by `policy/__main__.py` over the
analyzer protocol the Pulumi CLI speaks [PP-SDK]."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pulumi.runtime.mocks import MockMonitor

from model import tags as node_tags
from offline.plan import write_plan
from policy import rules

ROOT = Path(__file__).resolve().parents[2]
STACKS = ("dev", "prod")


def _render(tmp: Path, stack: str, overrides: list[str] = ()) -> list[dict]:
    """The plan's resources, each with the `protect` option the program registered it
    with (a resource option, so plan.json does not show it; the engine hands it to policies)."""
    protect: dict[tuple[str, str], bool] = {}
    register = MockMonitor.RegisterResource

    def recording(self, request):
        protect[(request.type, request.name)] = bool(request.protect)
        return register(self, request)

    MockMonitor.RegisterResource = recording
    try:
        plan = write_plan(stack, tmp / stack, list(overrides))
    finally:
        MockMonitor.RegisterResource = register
    return [{**r, "protect": protect[(r["type"], r["name"])]} for r in plan["resources"]]


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict[str, list[dict]]:
    tmp = tmp_path_factory.mktemp("policy-plans")
    return {stack: _render(tmp, stack) for stack in STACKS}


def _one(resources: list[dict], typ: str, name: str | None = None) -> dict:
    [found] = [r for r in resources if r["type"] == typ and (name is None or r["name"] == name)]
    return copy.deepcopy(found)


def _violations(resource: dict) -> dict[str, list[str]]:
    return rules.violations(resource["type"], resource["inputs"], resource["protect"])


@pytest.mark.parametrize("stack", STACKS)
def test_shipped_stacks_pass(plans, stack):
    resources = plans[stack]
    assert {r["name"]: _violations(r) for r in resources if _violations(r)} == {}
    # Not vacuous: the resources every rule looks at are in the plan, as the rules expect.
    fsx = _one(resources, rules.FSX)
    assert fsx["protect"] is True and fsx["inputs"]["deploymentType"].startswith("PERSISTENT")
    lt = _one(resources, rules.LAUNCH_TEMPLATE, f"{stack}-lt")  # the workers' (the controller has its own)
    assert lt["inputs"]["metadataOptions"]["httpTokens"] == "required"
    assert len(lt["inputs"]["networkInterfaces"]) == {"dev": 33, "prod": 17}[stack]  # p5 and p5en: one per card + ENA
    assert any(r["type"] == rules.VPC_INGRESS_RULE for r in resources)
    assert sum(r["type"] == rules.AUTOSCALING_GROUP for r in resources) >= 2


def test_tagged_types_cover_the_plans(plans):
    """A resource type the program tags but the rule does not know would go unchecked."""
    tagged = {r["type"] for rs in plans.values() for r in rs if r["custom"] and "tags" in r["inputs"]}
    assert tagged <= rules.TAGGED_TYPES, tagged - rules.TAGGED_TYPES


# --- each rule fails on a broken copy of a real resource -----------------------------


def test_fsx_unprotected(plans):
    fsx = _one(plans["dev"], rules.FSX)
    fsx["protect"] = False
    assert _violations(fsx) == {
        "fsx-protected": [
            "FSx for Lustre (PERSISTENT_2) is not protected: set `fsx.protect: true` (the default) "
            "so that no preview can delete or replace /fsx"
        ]
    }
    fsx["protect"] = True
    fsx["inputs"]["skipFinalBackup"] = True
    assert _violations(fsx) == {
        "fsx-protected": ["FSx for Lustre (PERSISTENT_2) skips its final backup on delete: set skip_final_backup=False"]
    }


def test_fsx_unprotected_by_the_stack_file(tmp_path):
    """The program itself, told `fsx.protect: false`, renders a plan the pack rejects."""
    resources = _render(tmp_path, "dev", ["fsx.protect=false"])
    broken = {r["name"]: _violations(r) for r in resources if _violations(r)}
    assert list(broken) == ["dev-lustre"] and list(broken["dev-lustre"]) == ["fsx-protected"]


def test_fsx_linked_to_s3_relies_on_the_bucket(plans):
    """prod's PERSISTENT_2 is linked to S3 (a data repository association): FSx takes
    no backups of it [FSX-CREATEBACKUP], so it skips the final backup and still passes;
    it stays protected."""
    fsx = _one(plans["prod"], rules.FSX)
    assert fsx["inputs"]["skipFinalBackup"] is True and fsx["inputs"]["automaticBackupRetentionDays"] == 0
    assert fsx["inputs"]["tags"]["GpuClusterDataRepository"] == "s3://example-prod-training-data"
    assert any(r["type"] == "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation" for r in plans["prod"])
    assert _violations(fsx) == {}
    fsx["inputs"]["automaticBackupRetentionDays"] = 7
    assert _violations(fsx) == {
        "fsx-protected": [
            "FSx for Lustre (PERSISTENT_2) is linked to S3 and asks for 7 days of automatic backups, which FSx "
            "does not take of a linked file system: set fsx.backup_retention_days: 0 and fsx.allow_no_backups: true"
        ]
    }
    fsx["inputs"]["automaticBackupRetentionDays"] = 0
    fsx["protect"] = False
    assert list(_violations(fsx)["fsx-protected"]) == [
        "FSx for Lustre (PERSISTENT_2) is not protected: set `fsx.protect: true` (the default) "
        "so that no preview can delete or replace /fsx"
    ]


def test_fsx_unlinked_skipping_the_final_backup_still_fails(plans):
    """Without the program's tag (or an import path) the same file system is unlinked:
    skipping the final backup is a violation again."""
    fsx = _one(plans["prod"], rules.FSX)
    del fsx["inputs"]["tags"]["GpuClusterDataRepository"]
    assert _violations(fsx) == {
        "fsx-protected": ["FSx for Lustre (PERSISTENT_2) skips its final backup on delete: set skip_final_backup=False"]
    }


def test_fsx_persistent1_import_path_is_linked(plans):
    fsx = _one(plans["dev"], rules.FSX)
    fsx["inputs"].update(
        deploymentType="PERSISTENT_1",
        importPath="s3://my-training-data/x",
        skipFinalBackup=True,
        automaticBackupRetentionDays=0,
    )
    assert _violations(fsx) == {}
    fsx["inputs"]["importPath"] = None
    assert list(_violations(fsx)) == ["fsx-protected"]


def test_fsx_scratch_is_disposable(plans):
    fsx = _one(plans["dev"], rules.FSX)
    fsx["protect"] = False
    fsx["inputs"].update(deploymentType="SCRATCH_2", skipFinalBackup=True)
    assert _violations(fsx) == {}


@pytest.mark.parametrize("tokens", ["optional", None])
def test_imdsv1_allowed(plans, tokens):
    lt = _one(plans["dev"], rules.LAUNCH_TEMPLATE, "dev-lt")
    if tokens is None:
        del lt["inputs"]["metadataOptions"]["httpTokens"]
    else:
        lt["inputs"]["metadataOptions"]["httpTokens"] = tokens
    assert _violations(lt) == {
        "imdsv2-required": [
            f"instance metadata allows IMDSv1 (metadata_options.http_tokens={tokens!r}): set it to 'required'"
        ]
    }


@pytest.mark.parametrize(("key", "cidr"), [("cidrIpv4", "0.0.0.0/0"), ("cidrIpv6", "::/0"), ("cidrIpv4", "0.0.0.0/00")])
def test_open_ingress_rule(plans, key, cidr):
    rule = _one(plans["dev"], rules.VPC_INGRESS_RULE, "dev-self-in")
    del rule["inputs"]["referencedSecurityGroupId"]
    rule["inputs"][key] = cidr
    assert _violations(rule) == {
        "no-open-ingress": [f"ingress open to {cidr}: admit the cluster's own security group instead"]
    }


def test_narrow_ingress_passes(plans):
    rule = _one(plans["dev"], rules.VPC_INGRESS_RULE, "dev-self-in")
    rule["inputs"]["cidrIpv4"] = "10.0.0.0/16"
    assert _violations(rule) == {}


def test_open_ingress_inline_and_legacy_rule(plans):
    sg = _one(plans["dev"], rules.SECURITY_GROUP)
    sg["inputs"]["ingress"] = [
        {"fromPort": 22, "toPort": 22, "protocol": "tcp", "cidrBlocks": ["10.0.0.0/8", "0.0.0.0/0"]},
        {"fromPort": 443, "toPort": 443, "protocol": "tcp", "ipv6CidrBlocks": ["::/0"]},
    ]
    assert _violations(sg) == {
        "no-open-ingress": [
            "ingress open to 0.0.0.0/0: admit the cluster's own security group instead",
            "ingress open to ::/0: admit the cluster's own security group instead",
        ]
    }
    legacy = {"type": "ingress", "fromPort": 0, "toPort": 65535, "protocol": "-1", "cidrBlocks": ["0.0.0.0/0"]}
    assert rules.violations(rules.SECURITY_GROUP_RULE, legacy) == {
        "no-open-ingress": ["ingress open to 0.0.0.0/0: admit the cluster's own security group instead"]
    }
    assert rules.violations(rules.SECURITY_GROUP_RULE, {**legacy, "type": "egress"}) == {}


def test_interface_without_security_groups(plans):
    lt = _one(plans["prod"], rules.LAUNCH_TEMPLATE, "prod-lt")
    ni = lt["inputs"]["networkInterfaces"][5]
    ni["securityGroups"] = []
    assert _violations(lt) == {
        "interfaces-have-security-groups": [
            f"launch template interface at network card {ni['networkCardIndex']}, device {ni['deviceIndex']} "
            "has no security groups"
        ]
    }
    del ni["securityGroups"]
    assert list(_violations(lt)) == ["interfaces-have-security-groups"]


@pytest.mark.parametrize(
    ("key", "snake"),
    [("vpcSecurityGroupIds", "vpc_security_group_ids"), ("securityGroupNames", "security_group_names")],
)
def test_top_level_security_groups_beside_interfaces(plans, key, snake):
    lt = _one(plans["dev"], rules.LAUNCH_TEMPLATE, "dev-lt")
    lt["inputs"][key] = ["sg-0123456789abcdef0"]
    assert _violations(lt) == {
        "no-top-level-security-groups": [
            f"launch template sets `{snake}` beside network interfaces: EC2 refuses the launch"
        ]
    }
    # Without interfaces the instance-level groups are the only groups, and allowed.
    del lt["inputs"]["networkInterfaces"]
    assert _violations(lt) == {}


def test_missing_cluster_tag(plans):
    fsx = _one(plans["prod"], rules.FSX)
    del fsx["inputs"]["tags"][node_tags.CLUSTER]
    assert _violations(fsx) == {"required-tags": ["missing tag 'GpuClusterName'"]}
    role = _one(plans["prod"], "aws:iam/role:Role", "prod-controller-role")
    del role["inputs"]["tags"]
    assert _violations(role) == {"required-tags": ["missing tag 'GpuClusterName'"]}


def test_launch_template_tags_what_it_launches(plans):
    lt = _one(plans["dev"], rules.LAUNCH_TEMPLATE, "dev-lt")
    spec = next(s for s in lt["inputs"]["tagSpecifications"] if s["resourceType"] == "volume")
    del spec["tags"][node_tags.CLUSTER]
    assert _violations(lt) == {"required-tags": ["tag_specifications[volume] missing tag 'GpuClusterName'"]}


def test_group_propagates_node_identity(plans):
    asg = _one(plans["dev"], rules.AUTOSCALING_GROUP, "dev-controller")
    for tag in asg["inputs"]["tags"]:
        if tag["key"] == node_tags.ROLE:
            tag["propagateAtLaunch"] = False
    assert _violations(asg) == {
        "required-tags": ["tag 'GpuClusterRole' is not propagated at launch: nodes read it from instance metadata"]
    }


def _snake_keys(value, under_tags: bool = False):
    """The SDK's snake_case spelling of engine (camelCase) inputs; tag keys stay as they are."""
    if isinstance(value, dict):
        if under_tags:
            return dict(value)
        return {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): _snake_keys(v, k == "tags") for k, v in value.items()}
    if isinstance(value, list):
        return [_snake_keys(v, under_tags) for v in value]
    return value


def test_snake_case_inputs_get_the_same_answers(plans):
    lt = _one(plans["dev"], rules.LAUNCH_TEMPLATE, "dev-lt")
    snake = _snake_keys(lt["inputs"])
    assert "metadata_options" in snake and snake["tags"] == lt["inputs"]["tags"]
    assert rules.violations(rules.LAUNCH_TEMPLATE, snake) == {}
    snake["metadata_options"]["http_tokens"] = "optional"
    snake["network_interfaces"][0]["security_groups"] = []
    snake["vpc_security_group_ids"] = ["sg-0123456789abcdef0"]
    assert sorted(rules.violations(rules.LAUNCH_TEMPLATE, snake)) == [
        "imdsv2-required",
        "interfaces-have-security-groups",
        "no-top-level-security-groups",
    ]


# --- through pulumi-policy ---------------------------------------------------------


def _through_pack(resource: dict) -> dict[str, list[str]]:
    """Every policy of the pack on one resource, with pulumi-policy's own argument types
    and unknown-checking property proxy (what the analyzer hands a policy)."""
    from pulumi_policy import PolicyCustomTimeouts, PolicyResourceOptions, ResourceValidationArgs
    from pulumi_policy.proxy import unknown_checking_proxy

    from policy.pack import policies

    opts = PolicyResourceOptions(
        protect=resource["protect"],
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
    )
    urn = resource["urn"]
    args = ResourceValidationArgs(
        resource["type"], unknown_checking_proxy(resource["inputs"]), urn, resource["name"], opts, None
    )
    found: dict[str, list[str]] = {}
    for policy in policies():

        def report(message, violation_urn=None, name=policy.name):
            assert violation_urn == urn
            found.setdefault(name, []).append(message)

        assert policy.validate(args, report) is None
    return found


def test_pack_policies_are_mandatory():
    from pulumi_policy import EnforcementLevel

    from policy.pack import policies

    pack = policies()
    assert [p.name for p in pack] == [r.name for r in rules.RULES]
    assert {p.enforcement_level for p in pack} == {EnforcementLevel.MANDATORY}


def test_pack_on_rendered_plans(plans):
    for resources in plans.values():
        assert {r["name"]: _through_pack(r) for r in resources if _through_pack(r)} == {}
    lt = _one(plans["dev"], rules.LAUNCH_TEMPLATE, "dev-lt")
    lt["inputs"]["metadataOptions"]["httpTokens"] = "optional"
    assert _through_pack(lt) == {
        "imdsv2-required": [
            "instance metadata allows IMDSv1 (metadata_options.http_tokens='optional'): set it to 'required'"
        ]
    }
    fsx = _one(plans["dev"], rules.FSX)
    fsx["protect"] = False
    assert list(_through_pack(fsx)) == ["fsx-protected"]


def test_pack_counts_unknown_security_groups(plans):
    """During a preview the group created in the same run is an unknown id: the rule
    counts interfaces' groups without reading them, so it still decides."""
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

    lt = _one(plans["dev"], rules.LAUNCH_TEMPLATE, "dev-lt")
    for ni in lt["inputs"]["networkInterfaces"]:
        ni["securityGroups"] = [UNKNOWN_STRING_VALUE]
    assert _through_pack(lt) == {}
    lt["inputs"]["networkInterfaces"][0]["securityGroups"] = []
    assert list(_through_pack(lt)) == ["interfaces-have-security-groups"]


def test_main_serves_the_pack(plans):
    """`policy/__main__.py` as the CLI runs it (working directory policy/): it prints the
    analyzer's port; GetAnalyzerInfo lists the policies, Analyze applies them."""
    import grpc
    from google.protobuf import empty_pb2, json_format, struct_pb2
    from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

    proc = subprocess.Popen(
        [sys.executable, "-u", "__main__.py"],
        cwd=ROOT / "policy",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = proc.stdout.readline().strip()
        assert port.isdigit(), proc.stderr.read() if proc.poll() is not None else port
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = analyzer_pb2_grpc.AnalyzerStub(channel)
            info = stub.GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
            assert info.name == "gpu-cluster"
            assert [p.name for p in info.policies] == [r.name for r in rules.RULES]

            def analyze(resource: dict) -> list[tuple[str, str]]:
                props = struct_pb2.Struct()
                json_format.ParseDict(json.loads(json.dumps(resource["inputs"])), props)
                request = analyzer_pb2.AnalyzeRequest(
                    type=resource["type"],
                    properties=props,
                    urn=resource["urn"],
                    name=resource["name"],
                    options=analyzer_pb2.AnalyzerResourceOptions(protect=resource["protect"]),
                )
                response = stub.Analyze(request, timeout=30)
                return [(d.policyName, d.message) for d in response.diagnostics]

            fsx = _one(plans["dev"], rules.FSX)
            assert analyze(fsx) == []
            fsx["protect"] = False
            assert [name for name, _ in analyze(fsx)] == ["fsx-protected"]
            sg_rule = _one(plans["dev"], rules.VPC_INGRESS_RULE, "dev-self-in")
            sg_rule["inputs"]["cidrIpv6"] = "::/0"
            # The CLI shows the policy's description, then the violation.
            assert analyze(sg_rule) == [
                (
                    "no-open-ingress",
                    "No security group ingress from 0.0.0.0/0 or ::/0.\n"
                    "ingress open to ::/0: admit the cluster's own security group instead",
                )
            ]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
