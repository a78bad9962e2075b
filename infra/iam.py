"""Node identity: an instance role and profile for SSM access, nothing more.

Shells go through SSM Session Manager (AmazonSSMManagedInstanceCore); no SSH key is
created or referenced anywhere. The node scripts read their own identity and tags from
instance metadata (IMDSv2, docs/node-contract.md), so no EC2 API permission is needed.
The extras: s3:GetObject on exactly the user-data payload object and the published
block ends (`blocks/ends.json`, read by the controller's agent loop), and, with
`containers`, ECR pulls and reads of the named registry secrets (`registry_read_policy`).

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


def payload_read_policy(object_arn: str, *more_arns: str) -> str:
    """Read access to exactly the named S3 objects (the user-data payload, and with
    Capacity Blocks the published block ends): no prefix, no wildcard."""
    resource: str | list[str] = [object_arn, *more_arns] if more_arns else object_arn
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": resource}],
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
    # The published block ends (infra/payload.py BlockEndsObject); None without blocks.
    block_ends_object_arn: pulumi.Input[str] | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # node_iam: extra managed policies, and the inline policy document (JSON) of the
    # extra statements (None: no inline policy).
    managed_policy_arns: tuple[str, ...] = ()
    extra_policy: str | None = None
    # containers: ECR pulls and registry secrets (model/registries.py); None: no statement.
    registry_policy: pulumi.Input[str] | None = None
    # Who wears the role, for its description: the workers' role and the controller's
    # own role (infra/cluster.py) carry the same grants today; permissions only the
    # controller needs are added to the controller's role alone.
    holders: str = "GPU nodes"


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
            description=f"gpu-cluster {args.cluster_name} {args.holders} (SSM access only)",
            tags=args.tags,
            opts=self.child,
        )
        aws.iam.RolePolicyAttachment(f"{name}-ssm", role=role.name, policy_arn=SSM_CORE_POLICY_ARN, opts=self.child)
        if args.payload_object_arn is not None:
            aws.iam.RolePolicy(
                f"{name}-payload",
                role=role.id,
                policy=pulumi.Output.all(
                    args.payload_object_arn, *([args.block_ends_object_arn] if args.block_ends_object_arn else [])
                ).apply(lambda arns: payload_read_policy(*arns)),
                opts=self.child,
            )
        for arn, logical in attachment_names(name, args.managed_policy_arns).items():
            aws.iam.RolePolicyAttachment(logical, role=role.name, policy_arn=arn, opts=self.child)
        if args.extra_policy is not None:
            aws.iam.RolePolicy(f"{name}-node-iam", role=role.id, policy=args.extra_policy, opts=self.child)
        if args.registry_policy is not None:
            aws.iam.RolePolicy(f"{name}-registries", role=role.id, policy=args.registry_policy, opts=self.child)
        profile = aws.iam.InstanceProfile(f"{name}-profile", role=role.name, tags=args.tags, opts=self.child)
        self.role_name = role.name
        self.instance_profile_name = profile.name
        self.instance_profile_arn = profile.arn
        self.register_outputs(
            {"role_name": role.name, "instance_profile_name": profile.name, "instance_profile_arn": profile.arn}
        )
