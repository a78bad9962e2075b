"""Security group shared by the GPU nodes and the FSx file system.

EFA requires a group that allows all traffic in from itself and out to itself
[EFA-START]; the egress half matters because the provider removes AWS's
default allow-all egress rule on create [PA-SG]. FSx for Lustre needs TCP 988 and
1018-1023 between its file servers and from the clients [FSX-SG]: FSx is given this
same group, so the self rules already cover those ports in both directions.

Nothing is open inbound from outside the group: shells go through SSM Session Manager,
which is an outbound HTTPS connection from the node's agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.component import Component

# Egress to the internet (through the NAT gateway): HTTPS for the SSM agent, ECR/NGC
# image pulls, the FSx Lustre client repository and S3; HTTP for Ubuntu's apt mirrors.
# DNS (VPC resolver) and time (169.254.169.123) are link-local and not filtered by
# security groups, so no other port is needed.
SECURITY_GROUP_DESCRIPTION = "gpu-cluster: EFA nodes and FSx, self-referencing"

INTERNET_EGRESS_PORTS = (
    ("tcp", 443, "HTTPS: SSM agent, image pulls, S3, FSx client repo"),
    ("tcp", 80, "HTTP: Ubuntu apt mirrors"),
)


@dataclass
class NodeSecurityGroupArgs:
    cluster_name: str
    vpc_id: pulumi.Input[str]
    tags: dict[str, str] = field(default_factory=dict)


class NodeSecurityGroup(Component):
    """One group with standalone rules (never mixed with inline rules [PA-SG])."""

    TYPE = "gpu-cluster:index:NodeSecurityGroup"
    security_group_id: pulumi.Output[str]
    # The self-referencing rules (in and out) that open the Lustre ports: the file system
    # depends on them (infra/storage.py), since FSx refuses creation while port 988 is
    # closed [FSX-SG-FAIL] and the group starts with no rules at all [PA-SG].
    self_rules: list[pulumi.Resource]

    def __init__(self, name: str, args: NodeSecurityGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, opts)
        # The description maps to GroupDescription, which cannot be updated: changing it
        # replaces the group, and with it the file system that uses it (FSx cannot change
        # its security groups in place). So it is one constant, without the cluster name;
        # the Name tag says which cluster it belongs to.
        sg = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=args.vpc_id,
            description=SECURITY_GROUP_DESCRIPTION,
            revoke_rules_on_delete=True,
            tags={**args.tags, "Name": f"{args.cluster_name}-nodes"},
            opts=self.child,
        )
        self_in = aws.vpc.SecurityGroupIngressRule(
            f"{name}-self-in",
            security_group_id=sg.id,
            ip_protocol="-1",
            referenced_security_group_id=sg.id,
            description="EFA and Slurm between nodes; FSx Lustre TCP 988, 1018-1023",
            tags=args.tags,
            opts=self.child,
        )
        self_out = aws.vpc.SecurityGroupEgressRule(
            f"{name}-self-out",
            security_group_id=sg.id,
            ip_protocol="-1",
            referenced_security_group_id=sg.id,
            description="EFA needs egress to the group itself; FSx Lustre ports",
            tags=args.tags,
            opts=self.child,
        )
        for proto, port, why in INTERNET_EGRESS_PORTS:
            aws.vpc.SecurityGroupEgressRule(
                f"{name}-internet-{proto}{port}",
                security_group_id=sg.id,
                ip_protocol=proto,
                from_port=port,
                to_port=port,
                cidr_ipv4="0.0.0.0/0",
                description=why,
                tags=args.tags,
                opts=self.child,
            )
        self.self_rules = [self_in, self_out]
        self.security_group_id = sg.id
        self.register_outputs({"security_group_id": self.security_group_id})
