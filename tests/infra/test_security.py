"""Security group: self-referencing EFA rules, limited internet egress, no outside ingress."""

from __future__ import annotations

import pytest

from infra.security import NodeSecurityGroup, NodeSecurityGroupArgs
from tests.support.mocks import run_component

TAGS = {"GpuClusterName": "c1"}
SG = "aws:ec2/securityGroup:SecurityGroup"
IN = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
OUT = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"


@pytest.fixture(scope="module")
def run():
    def program():
        return NodeSecurityGroup(
            "c1", NodeSecurityGroupArgs(cluster_name="c1", vpc_id="vpc-0123", tags=TAGS)
        ).security_group_id

    return run_component(program)


def test_children(run):
    assert run.custom() == [
        (SG, "c1-sg"),
        (OUT, "c1-internet-tcp443"),
        (OUT, "c1-internet-tcp80"),
        (OUT, "c1-self-out"),
        (IN, "c1-self-in"),
    ]
    for typ, name in run.custom():
        assert run.parent_type(typ, name) == "gpu-cluster:index:NodeSecurityGroup"


def test_group(run):
    sg = run.inputs(SG, "c1-sg")
    assert sg["vpcId"] == "vpc-0123"
    assert sg["tags"] == {**TAGS, "Name": "c1-nodes"}
    # Standalone rules only: no inline rules to fight with them.
    assert "ingress" not in sg and "egress" not in sg


def test_self_rules_cover_all_traffic_both_ways(run):
    sg_id = run.value
    for typ, name in ((IN, "c1-self-in"), (OUT, "c1-self-out")):
        rule = run.inputs(typ, name)
        assert rule["securityGroupId"] == sg_id
        assert rule["referencedSecurityGroupId"] == sg_id
        assert rule["ipProtocol"] == "-1"
        assert "fromPort" not in rule and "toPort" not in rule and "cidrIpv4" not in rule


def test_fsx_lustre_ports_are_inside_the_self_rules(run):
    """FSx uses this same group: TCP 988 and 1018-1023 are covered by all-protocol self rules."""
    sg_id = run.value

    def allowed(typ, port):
        return any(
            r["inputs"]["referencedSecurityGroupId"] == sg_id
            and (
                r["inputs"]["ipProtocol"] == "-1"
                or (r["inputs"]["ipProtocol"] == "tcp" and r["inputs"]["fromPort"] <= port <= r["inputs"]["toPort"])
            )
            for r in run.of_type(typ)
            if "referencedSecurityGroupId" in r["inputs"]
        )

    for port in (988, 1018, 1019, 1020, 1021, 1022, 1023):
        assert allowed(IN, port) and allowed(OUT, port)


def test_nothing_inbound_from_outside(run):
    ingress = run.of_type(IN)
    assert len(ingress) == 1
    assert all(
        "cidrIpv4" not in r["inputs"] and "cidrIpv6" not in r["inputs"] and "prefixListId" not in r["inputs"]
        for r in ingress
    )


def test_internet_egress_is_https_and_http_only(run):
    internet = [r["inputs"] for r in run.of_type(OUT) if "cidrIpv4" in r["inputs"]]
    assert sorted((r["ipProtocol"], r["fromPort"], r["toPort"], r["cidrIpv4"]) for r in internet) == [
        ("tcp", 80, 80, "0.0.0.0/0"),
        ("tcp", 443, 443, "0.0.0.0/0"),
    ]
