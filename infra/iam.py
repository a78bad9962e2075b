"""Node identity: an instance role and profile for SSM access, nothing more.

Shells go through SSM Session Manager (AmazonSSMManagedInstanceCore); no SSH key is
created or referenced anywhere. The node scripts read their own identity and tags from
instance metadata (IMDSv2, docs/node-contract.md), so no EC2 API permission is needed.
The extras: s3:GetObject on exactly the user-data payload object; on the controller's
role alone, s3:GetObject on exactly the published block ends (`blocks/ends.json`: only
the controller's agent loop reads it, nodeside/lib/block-end.sh `block_end_fetch`); and,
with `containers`, ECR pulls and reads of the named registry secrets (`registry_read_policy`).
The controller's own role alone, with a replacing `repair.policy`: terminating an instance
of this cluster's worker groups without shrinking them (`repair_policy`), nothing else.

The controller's own role alone also reads EC2's network topology (`slurm.topology: tree`,
nodeside/topology.py): exactly `ec2:DescribeInstanceTopology` (`topology_read_policy`), on
`"*"`: EC2's Describe actions have no resource type or condition key to scope them by
[IAM-EC2]; its own inline policy `<cluster>-controller-topology`.

A stack can add its own permissions (`node_iam`): each extra managed policy is one
RolePolicyAttachment named after the policy, and the extra statements are one inline
RolePolicy, so a reviewer sees each grant as its own resource in `pulumi preview`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.component import Component
from model.node_iam import SSM_CORE_POLICY_ARN
from model.registries import RegistryAccess, registry_policy_document

EC2_ASSUME_ROLE_POLICY = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "ec2.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    },
    sort_keys=True,
)


def object_read_policy(object_arn: str) -> str:
    """Read access to exactly one S3 object (the user-data payload, or the published
    block ends): no prefix, no wildcard."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": object_arn}],
        },
        sort_keys=True,
    )


def topology_read_policy() -> str:
    """The controller's topology read: the one action, on every resource (it has no
    resource type to scope to) [IAM-EC2]."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "ReadInstanceTopology",
                    "Effect": "Allow",
                    "Action": "ec2:DescribeInstanceTopology",
                    "Resource": "*",
                }
            ],
        },
        sort_keys=True,
    )


def repair_policy(cluster_name: str, region: str, group_name_prefix: str) -> str:
    """The repair agent's one permission (nodeside/repair.py): TerminateInstanceInAutoScalingGroup
    on this cluster's worker groups only.

    The action takes an autoScalingGroup resource and the autoscaling:ResourceTag/<key>
    condition [IAM-AUTOSCALING]. Both scopes hold at once: the group ARN by this stack's
    fixed group names (`gpu-cluster-<stack>-*`, model/preflight.py asg_name) in this region,
    and the group's tags: GpuClusterName is this cluster and GpuClusterRole is `worker`, so
    the controller's own group (and another cluster's, even one whose stack name shares
    the prefix) can never be terminated from here. No describe call is granted: the agent
    knows each node's instance id from its boot marker on /fsx, and the call's answer
    names the group."""
    from model import tags as node_tags

    group_arn = f"arn:aws:autoscaling:{region}:*:autoScalingGroup:*:autoScalingGroupName/{group_name_prefix}-*"
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "ReplaceThisClustersWorkers",
                    "Effect": "Allow",
                    "Action": "autoscaling:TerminateInstanceInAutoScalingGroup",
                    "Resource": group_arn,
                    "Condition": {
                        "StringEquals": {
                            f"autoscaling:ResourceTag/{node_tags.CLUSTER}": cluster_name,
                            f"autoscaling:ResourceTag/{node_tags.ROLE}": "worker",
                        }
                    },
                }
            ],
        },
        sort_keys=True,
    )


def attachment_names(name: str, arns: tuple[str, ...]) -> dict[str, str]:
    """Logical name per extra policy ARN: `<name>-policy-<PolicyName>`, stable when the
    list is reordered (a position in the name would replace attachments on a reorder);
    two ARNs with the same policy name (other account or path) get a short hash each."""
    last = [arn.rsplit("/", 1)[1] for arn in arns]
    out = {}
    for arn, policy in zip(arns, last, strict=True):
        suffix = policy if last.count(policy) == 1 else f"{policy}-{hashlib.sha256(arn.encode()).hexdigest()[:8]}"
        out[arn] = f"{name}-policy-{suffix}"
    return out


def registry_read_policy(access: RegistryAccess) -> str:
    """The node role's inline policy for `containers` (model/registries.py builds it, so
    the config can check its size against IAM's limit before anything is created)."""
    return json.dumps(registry_policy_document(access), sort_keys=True)


@dataclass
class NodeIdentityArgs:
    cluster_name: str
    payload_object_arn: pulumi.Input[str] | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # node_iam: extra managed policies, and the inline policy document (JSON) of the
    # extra statements (None: no inline policy).
    managed_policy_arns: tuple[str, ...] = ()
    extra_policy: str | None = None
    # containers: ECR pulls and registry secrets (model/registries.py); None: no statement.
    registry_policy: pulumi.Input[str] | None = None
    # The controller's role only: the repair agent's permission (`repair_policy`); None: none.
    repair_policy: str | None = None
    # Permissions only this role's holders need, each its own named inline policy
    # (`<name>-<key>`) so a review sees each grant: the controller's read of the published
    # block ends (`object_read_policy`), its database secret, its topology read.
    own_policies: dict[str, pulumi.Input[str]] = field(default_factory=dict)
    # Who wears the role, for its description: the workers' role and the controller's
    # own role (infra/cluster.py); permissions only the controller needs are added to the
    # controller's role alone (own_policies, repair_policy).
    holders: str = "GPU nodes"


def _grants(args: NodeIdentityArgs) -> str:
    """What the role is for, in its description: a reviewer sees the repair grant there too."""
    return "SSM access, replaces failed workers" if args.repair_policy is not None else "SSM access only"


class NodeIdentity(Component):
    """Outputs: role_name, instance_profile_name, instance_profile_arn."""

    TYPE = "gpu-cluster:index:NodeIdentity"
    role_name: pulumi.Output[str]
    instance_profile_name: pulumi.Output[str]
    instance_profile_arn: pulumi.Output[str]

    def __init__(self, name: str, args: NodeIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, opts)
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=EC2_ASSUME_ROLE_POLICY,
            description=f"gpu-cluster {args.cluster_name} {args.holders} ({_grants(args)})",
            tags=args.tags,
            opts=self.child,
        )
        aws.iam.RolePolicyAttachment(f"{name}-ssm", role=role.name, policy_arn=SSM_CORE_POLICY_ARN, opts=self.child)
        if args.payload_object_arn is not None:
            aws.iam.RolePolicy(
                f"{name}-payload",
                role=role.id,
                policy=pulumi.Output.from_input(args.payload_object_arn).apply(object_read_policy),
                opts=self.child,
            )
        for arn, logical in attachment_names(name, args.managed_policy_arns).items():
            aws.iam.RolePolicyAttachment(logical, role=role.name, policy_arn=arn, opts=self.child)
        if args.extra_policy is not None:
            aws.iam.RolePolicy(f"{name}-node-iam", role=role.id, policy=args.extra_policy, opts=self.child)
        if args.registry_policy is not None:
            aws.iam.RolePolicy(f"{name}-registries", role=role.id, policy=args.registry_policy, opts=self.child)
        if args.repair_policy is not None:
            aws.iam.RolePolicy(f"{name}-repair", role=role.id, policy=args.repair_policy, opts=self.child)
        for key, document in sorted(args.own_policies.items()):
            aws.iam.RolePolicy(f"{name}-{key}", role=role.id, policy=document, opts=self.child)
        profile = aws.iam.InstanceProfile(f"{name}-profile", role=role.name, tags=args.tags, opts=self.child)
        self.role_name = role.name
        self.instance_profile_name = profile.name
        self.instance_profile_arn = profile.arn
        self.register_outputs(
            {"role_name": role.name, "instance_profile_name": profile.name, "instance_profile_arn": profile.arn}
        )
