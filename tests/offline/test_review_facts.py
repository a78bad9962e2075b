"""The review diff shows dependency and resource-option changes (text and markdown)."""

from __future__ import annotations

import copy

from offline import review as rv
from offline.mocks import OPTION_DEFAULTS

FS_URN = "urn:pulumi:dev::gpu-cluster::gpu-cluster:index:FileSystem$aws:fsx/lustreFileSystem:LustreFileSystem::c-lustre"
SG_URN = "urn:pulumi:dev::gpu-cluster::gpu-cluster:index:NodeSecurityGroup$aws:ec2/securityGroup:SecurityGroup::c-sg"
RULE_URN = (
    "urn:pulumi:dev::gpu-cluster::gpu-cluster:index:NodeSecurityGroup"
    "$aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule::c-self-in"
)


def _plan(fs_deps: list[str], protect: bool, size: int = 1200, facts: bool = True) -> dict:
    fs = {
        "type": rv.FSX_TYPE,
        "name": "c-lustre",
        "custom": True,
        "urn": FS_URN,
        "inputs": {"storageCapacity": size, "deploymentType": "PERSISTENT_2"},
        "dependencies": sorted(fs_deps),
        "options": {**OPTION_DEFAULTS, "protect": protect},
    }
    if not facts:
        del fs["dependencies"], fs["options"]
    return {"resources": [fs]}


def _report(base: dict, head: dict) -> rv.StackReport:
    rep = rv.StackReport("dev", changes=rv.compare_plans(base, head))
    rv.explain(rep, base, head)
    return rep


def test_dependency_and_option_change_without_input_change():
    base, head = _plan([SG_URN], True), _plan([RULE_URN, SG_URN], False)
    rep = _report(base, head)
    (c,) = rep.changes
    assert c.kind == "engine" and c.inputs == []
    assert c.dependencies == ["+ SecurityGroupIngressRule c-self-in"]
    assert c.options == [("protect", "true", "false")]
    assert c.notes == [
        "protect off: the engine may now delete or replace it",
        "inputs unchanged: AWS sees no call; the engine records the new facts in the stack state.",
    ]
    text = rv.format_text("0" * 40, "main", [rep])
    assert "  engine facts only      LustreFileSystem c-lustre" in text
    assert "      dependency + SecurityGroupIngressRule c-self-in" in text
    assert "      option protect: true -> false" in text
    assert "1 engine facts only" in text
    md = rv.format_markdown("0" * 40, "main", [rep])
    assert "dependencies: + SecurityGroupIngressRule c-self-in" in md
    assert "options: protect true -> false" in md
    assert "  dependency + SecurityGroupIngressRule c-self-in" in md  # the details block


def test_facts_ride_along_with_an_input_change():
    base, head = _plan([SG_URN, RULE_URN], True), _plan([SG_URN], True, size=2400)
    (c,) = _report(base, head).changes
    assert c.kind == "changed"
    assert c.inputs == [("storageCapacity", "1200", "2400")]
    assert c.dependencies == ["- SecurityGroupIngressRule c-self-in"]
    assert c.options == []


def test_no_fact_changes_no_report():
    assert rv.compare_plans(_plan([SG_URN], True), copy.deepcopy(_plan([SG_URN], True))) == []


def test_a_base_without_facts_compares_inputs_only_and_says_so():
    """Plans from before this change carry no dependencies: not every resource 'changed'."""
    base, head = _plan([], True, facts=False), _plan([SG_URN], True)
    rep = _report(base, head)
    assert rep.changes == []
    assert rep.notes == [
        "the base revision's plans record no dependencies or resource options (an older plan writer): "
        "only inputs are compared."
    ]


def test_ignore_changes_note_names_the_inputs():
    base = _plan([SG_URN], True)
    head = copy.deepcopy(base)
    head["resources"][0]["options"]["ignore_changes"] = ["storageCapacity"]
    (c,) = _report(base, head).changes
    assert c.options == [("ignore_changes", "[]", '["storageCapacity"]')]
    assert 'ignore_changes ["storageCapacity"]: after creation the engine no longer sends these inputs' in c.notes
