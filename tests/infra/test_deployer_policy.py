"""docs/deployer-iam-policy.json (and, for the team features, docs/deployer-iam-policy-team.json
beside it) grants what `pulumi up`/`destroy` and the `ops` reads need.

The program's needs come from the rendered plans: every Pulumi resource type and every
provider lookup (invoke) that the shipped stacks and the variants below produce is a row
of PROGRAM_ACTIONS, the one table of what each needs in IAM (create, read, update,
delete and tag calls the provider makes, plus the cross-service checks AWS documents:
[ASG-API-PERMS] for groups launched from a template with an instance profile,
[FSX-DELETE] for the final backup, [FSX-FULL] for FSx's service-linked roles and the
S3 link). A new resource type or lookup fails here until its row is written and the
policy grants it. `ops` needs are not tabled: the commands run against stubbed AWS and
every API call they make is recorded and must be granted.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import json
import re
import shutil
from pathlib import Path

import botocore.session
import pytest

from offline.mocks import plan_mocks, run_under_mocks
from offline.plan import load_stack_config
from ops.cli import main as ops_main
from tests.support.iam_policy import RecordingAws, granted
from tests.support.iam_policy import allowed as _allowed
from tests.support.ops_stubs import context

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "docs" / "deployer-iam-policy.json"
# What stacks with accounting (RDS, its managed secret) and logs need besides: a managed
# policy takes at most 6,144 characters [IAM-QUOTAS], so the team features have their own.
TEAM_POLICY = REPO / "docs" / "deployer-iam-policy-team.json"
POLICIES = (POLICY, TEAM_POLICY)

_ROLE = [
    "iam:CreateRole",
    "iam:GetRole",
    "iam:UpdateRole",
    "iam:UpdateRoleDescription",
    "iam:UpdateAssumeRolePolicy",
    "iam:TagRole",
    "iam:UntagRole",
    "iam:ListRolePolicies",
    "iam:ListAttachedRolePolicies",
    "iam:ListInstanceProfilesForRole",
    "iam:DeleteRole",
]
_FSX_SLR = ["iam:CreateServiceLinkedRole"]
# Linking S3 (import path or data repository association) creates a per-file-system
# service-linked role and attaches its policy as the caller [FSX-FULL].
_FSX_S3_LINK = ["iam:AttachRolePolicy", "iam:PutRolePolicy", "s3:ListBucket", "s3:GetBucketLocation"]
_S3_BUCKET_READ = [
    "s3:ListBucket",
    "s3:GetBucketAcl",
    "s3:GetBucketCors",
    "s3:GetBucketWebsite",
    "s3:GetBucketVersioning",
    "s3:GetAccelerateConfiguration",
    "s3:GetBucketRequestPayment",
    "s3:GetBucketLogging",
    "s3:GetLifecycleConfiguration",
    "s3:GetReplicationConfiguration",
    "s3:GetEncryptionConfiguration",
    "s3:GetBucketObjectLockConfiguration",
    "s3:GetBucketPolicy",
    "s3:GetBucketTagging",
    "s3:GetBucketLocation",
]

# Pulumi type or invoke token -> IAM actions the provider needs to create, read, update,
# delete and tag it. One home: README and docs/first-run.md point here.
PROGRAM_ACTIONS: dict[str, list[str]] = {
    # --- lookups (the program's preflight and the existing-subnet path) -------------
    "aws:index/getAvailabilityZones:getAvailabilityZones": ["ec2:DescribeAvailabilityZones"],
    "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation": ["ec2:DescribeCapacityReservations"],
    "aws:ec2/getSubnet:getSubnet": ["ec2:DescribeSubnets"],
    "aws:ec2/getRouteTable:getRouteTable": ["ec2:DescribeRouteTables"],
    "aws:ec2/getVpc:getVpc": ["ec2:DescribeVpcs", "ec2:DescribeVpcAttribute", "ec2:DescribeRouteTables"],
    "aws:ec2/getAmi:getAmi": ["ec2:DescribeImages"],
    # where the live controller runs, before a block-list edit may move it (the groups
    # data source, then the group itself: infra/preflight.py controller_move_problems)
    "aws:autoscaling/getAmiIds:getAmiIds": ["autoscaling:DescribeAutoScalingGroups"],
    "aws:autoscaling/getGroup:getGroup": ["autoscaling:DescribeAutoScalingGroups"],
    # the stack's own account names its ECR registry (containers.ecr: true)
    "aws:index/getCallerIdentity:getCallerIdentity": ["sts:GetCallerIdentity"],
    # --- containers: a stack secret stored as an SSM SecureString for the nodes ------
    "aws:ssm/parameter:Parameter": [
        "ssm:PutParameter",
        "ssm:GetParameter",
        "ssm:GetParameters",
        "ssm:DescribeParameters",
        "ssm:DeleteParameter",
        "ssm:AddTagsToResource",
        "ssm:RemoveTagsFromResource",
        "ssm:ListTagsForResource",
    ],
    # --- created VPC (no network.subnet_id) -----------------------------------------
    "aws:ec2/vpc:Vpc": [
        "ec2:CreateVpc",
        "ec2:DescribeVpcs",
        "ec2:DescribeVpcAttribute",
        "ec2:ModifyVpcAttribute",
        "ec2:DescribeRouteTables",  # the VPC's main route table
        "ec2:DescribeNetworkAcls",  # its default network ACL
        "ec2:DescribeSecurityGroups",  # its default security group
        "ec2:CreateTags",
        "ec2:DeleteTags",
        "ec2:DeleteVpc",
    ],
    "aws:ec2/subnet:Subnet": [
        "ec2:CreateSubnet",
        "ec2:DescribeSubnets",
        "ec2:ModifySubnetAttribute",
        "ec2:DescribeNetworkInterfaces",  # delete waits for FSx/instance interfaces to go
        "ec2:CreateTags",
        "ec2:DeleteSubnet",
    ],
    "aws:ec2/internetGateway:InternetGateway": [
        "ec2:CreateInternetGateway",
        "ec2:AttachInternetGateway",
        "ec2:DescribeInternetGateways",
        "ec2:DetachInternetGateway",
        "ec2:CreateTags",
        "ec2:DeleteInternetGateway",
    ],
    "aws:ec2/eip:Eip": [
        "ec2:AllocateAddress",
        "ec2:DescribeAddresses",
        "ec2:DescribeAddressesAttribute",
        "ec2:DisassociateAddress",
        "ec2:CreateTags",
        "ec2:ReleaseAddress",
    ],
    "aws:ec2/natGateway:NatGateway": [
        "ec2:CreateNatGateway",
        "ec2:DescribeNatGateways",
        "ec2:CreateTags",
        "ec2:DeleteNatGateway",
    ],
    "aws:ec2/routeTable:RouteTable": [
        "ec2:CreateRouteTable",
        "ec2:DescribeRouteTables",
        "ec2:CreateTags",
        "ec2:DeleteRouteTable",
    ],
    "aws:ec2/route:Route": ["ec2:CreateRoute", "ec2:DescribeRouteTables", "ec2:ReplaceRoute", "ec2:DeleteRoute"],
    "aws:ec2/routeTableAssociation:RouteTableAssociation": [
        "ec2:AssociateRouteTable",
        "ec2:DescribeRouteTables",
        "ec2:ReplaceRouteTableAssociation",
        "ec2:DisassociateRouteTable",
    ],
    "aws:ec2/vpcEndpoint:VpcEndpoint": [
        "ec2:CreateVpcEndpoint",
        "ec2:DescribeVpcEndpoints",
        "ec2:DescribePrefixLists",  # a gateway endpoint's prefix list
        "ec2:ModifyVpcEndpoint",
        "ec2:CreateTags",
        "ec2:DeleteVpcEndpoints",
    ],
    # --- security group, template, placement group ----------------------------------
    "aws:ec2/securityGroup:SecurityGroup": [
        "ec2:CreateSecurityGroup",
        "ec2:DescribeSecurityGroups",
        "ec2:RevokeSecurityGroupEgress",  # the provider drops AWS's default egress rule [PA-SG]
        "ec2:RevokeSecurityGroupIngress",  # revoke_rules_on_delete
        "ec2:DescribeSecurityGroupRules",
        "ec2:DescribeNetworkInterfaces",
        "ec2:CreateTags",
        "ec2:DeleteSecurityGroup",
    ],
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": [
        "ec2:AuthorizeSecurityGroupIngress",
        "ec2:DescribeSecurityGroupRules",
        "ec2:ModifySecurityGroupRules",
        "ec2:UpdateSecurityGroupRuleDescriptionsIngress",
        "ec2:CreateTags",
        "ec2:DeleteTags",
        "ec2:RevokeSecurityGroupIngress",
    ],
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": [
        "ec2:AuthorizeSecurityGroupEgress",
        "ec2:DescribeSecurityGroupRules",
        "ec2:ModifySecurityGroupRules",
        "ec2:UpdateSecurityGroupRuleDescriptionsEgress",
        "ec2:CreateTags",
        "ec2:DeleteTags",
        "ec2:RevokeSecurityGroupEgress",
    ],
    "aws:ec2/launchTemplate:LaunchTemplate": [
        "ec2:CreateLaunchTemplate",
        "ec2:CreateLaunchTemplateVersion",
        "ec2:ModifyLaunchTemplate",  # update_default_version
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeLaunchTemplateVersions",
        "ec2:CreateTags",
        "ec2:DeleteLaunchTemplate",
    ],
    "aws:ec2/placementGroup:PlacementGroup": [
        "ec2:CreatePlacementGroup",
        "ec2:DescribePlacementGroups",
        "ec2:CreateTags",
        "ec2:DeletePlacementGroup",
    ],
    # --- node groups -----------------------------------------------------------------
    "aws:autoscaling/group:Group": [
        "autoscaling:CreateAutoScalingGroup",
        "autoscaling:DescribeAutoScalingGroups",
        "autoscaling:DescribeScalingActivities",
        "autoscaling:UpdateAutoScalingGroup",
        "autoscaling:CreateOrUpdateTags",
        "autoscaling:DeleteTags",
        "autoscaling:DeleteAutoScalingGroup",
        # A group launched from a template that names an instance profile [ASG-API-PERMS]:
        "ec2:RunInstances",
        "ec2:CreateTags",
        "iam:PassRole",
        "iam:CreateServiceLinkedRole",
    ],
    "aws:autoscaling/schedule:Schedule": [
        "autoscaling:PutScheduledUpdateGroupAction",
        "autoscaling:DescribeScheduledActions",
        "autoscaling:DeleteScheduledAction",
    ],
    # --- FSx -------------------------------------------------------------------------
    "aws:fsx/lustreFileSystem:LustreFileSystem": [
        "fsx:CreateFileSystem",
        "fsx:DescribeFileSystems",
        "fsx:UpdateFileSystem",
        "fsx:TagResource",
        "fsx:UntagResource",
        "fsx:ListTagsForResource",
        "fsx:DeleteFileSystem",
        "fsx:CreateBackup",  # skip_final_backup false [FSX-DELETE]
        "fsx:DescribeBackups",
        *_FSX_SLR,
        *_FSX_S3_LINK,  # import/export path of PERSISTENT_1 and SCRATCH_2
    ],
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": [
        "fsx:CreateDataRepositoryAssociation",
        "fsx:DescribeDataRepositoryAssociations",
        "fsx:UpdateDataRepositoryAssociation",
        "fsx:TagResource",
        "fsx:UntagResource",
        "fsx:ListTagsForResource",
        "fsx:DeleteDataRepositoryAssociation",
        *_FSX_SLR,
        *_FSX_S3_LINK,
    ],
    # --- node identity ---------------------------------------------------------------
    "aws:iam/role:Role": _ROLE,
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": [
        "iam:AttachRolePolicy",
        "iam:ListAttachedRolePolicies",
        "iam:DetachRolePolicy",
    ],
    "aws:iam/rolePolicy:RolePolicy": ["iam:PutRolePolicy", "iam:GetRolePolicy", "iam:DeleteRolePolicy"],
    "aws:iam/instanceProfile:InstanceProfile": [
        "iam:CreateInstanceProfile",
        "iam:GetInstanceProfile",
        "iam:AddRoleToInstanceProfile",
        "iam:RemoveRoleFromInstanceProfile",
        "iam:TagInstanceProfile",
        "iam:UntagInstanceProfile",
        "iam:DeleteInstanceProfile",
    ],
    # --- accounting: RDS for MariaDB with an RDS-managed secret [RDS-SM] --------------
    "aws:rds/subnetGroup:SubnetGroup": [
        "rds:CreateDBSubnetGroup",
        "rds:DescribeDBSubnetGroups",
        "rds:ModifyDBSubnetGroup",
        "rds:AddTagsToResource",
        "rds:RemoveTagsFromResource",
        "rds:ListTagsForResource",
        "rds:DeleteDBSubnetGroup",
    ],
    "aws:rds/parameterGroup:ParameterGroup": [
        "rds:CreateDBParameterGroup",
        "rds:DescribeDBParameterGroups",
        "rds:DescribeDBParameters",
        "rds:ModifyDBParameterGroup",
        "rds:ResetDBParameterGroup",
        "rds:AddTagsToResource",
        "rds:RemoveTagsFromResource",
        "rds:ListTagsForResource",
        "rds:DeleteDBParameterGroup",
    ],
    "aws:rds/instance:Instance": [
        "rds:CreateDBInstance",
        "rds:DescribeDBInstances",
        "rds:ModifyDBInstance",
        "rds:AddTagsToResource",
        "rds:RemoveTagsFromResource",
        "rds:ListTagsForResource",
        "rds:DeleteDBInstance",
        "rds:CreateDBSnapshot",  # the final snapshot of a protected database
        "rds:DescribeDBSnapshots",
        "iam:CreateServiceLinkedRole",  # AWSServiceRoleForRDS, on a first RDS instance
        # manage_master_user_password: RDS creates, rotates and deletes the secret as the caller
        "secretsmanager:CreateSecret",
        "secretsmanager:DescribeSecret",
        "secretsmanager:RotateSecret",
        "secretsmanager:TagResource",
        "secretsmanager:DeleteSecret",
        "kms:DescribeKey",
    ],
    # --- logs: the cluster's log group and dashboard (infra/logs.py) ------------------
    # the provider's create/read/update/delete and tags (identifierAttribute arn) [TF-LOGGROUP]
    "aws:cloudwatch/logGroup:LogGroup": [
        "logs:CreateLogGroup",
        "logs:DescribeLogGroups",
        "logs:PutRetentionPolicy",
        "logs:DeleteRetentionPolicy",
        "logs:AssociateKmsKey",
        "logs:DisassociateKmsKey",
        "logs:TagResource",
        "logs:UntagResource",
        "logs:ListTagsForResource",
        "logs:DeleteLogGroup",
    ],
    "aws:cloudwatch/dashboard:Dashboard": [
        "cloudwatch:PutDashboard",
        "cloudwatch:GetDashboard",
        "cloudwatch:DeleteDashboards",
    ],
    # --- payload bucket and object ---------------------------------------------------
    "aws:s3/bucket:Bucket": [
        "s3:CreateBucket",
        *_S3_BUCKET_READ,
        "s3:PutBucketTagging",
        # force_destroy: every object version goes before the bucket
        "s3:ListBucketVersions",
        "s3:DeleteObject",
        "s3:DeleteObjectVersion",
        "s3:DeleteBucket",
    ],
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": [
        "s3:PutBucketPublicAccessBlock",
        "s3:GetBucketPublicAccessBlock",
    ],
    "aws:s3/bucketObjectv2:BucketObjectv2": [
        "s3:PutObject",
        "s3:PutObjectTagging",
        "s3:GetObject",
        "s3:GetObjectTagging",
        "s3:DeleteObject",
        "s3:DeleteObjectVersion",
    ],
}

# Deploys whose plans together use every row above: the shipped stacks (dev: existing
# subnet, one block; prod: created VPC, two blocks, an S3 data repository) and variants
# for the on-demand placement group and the legacy S3 link on the file system itself.
REAL_IDS = {"ami-0a1b2c3d4e5f60718": "ami-04c7e1b95a3d2f806"}


def _variants() -> dict[str, tuple[dict, str]]:
    dev, dev_region = load_stack_config("dev")
    prod, prod_region = load_stack_config("prod")
    on_demand = copy.deepcopy(prod)
    on_demand["capacity"] = {"nodes": 2}
    on_demand.pop("controller", None)  # prod names its controller's block; no blocks here
    legacy = copy.deepcopy(prod)
    legacy["fsx"] = {
        "deployment_type": "PERSISTENT_1",
        "storage_capacity_gib": 2400,
        "per_unit_storage_throughput": 200,
        "data_repository": {"s3_uri": "s3://my-training-data/datasets"},
        "backup_retention_days": 0,  # FSx backs up no linked file system
        "allow_no_backups": True,
    }
    # private registries (ECR of this account, an NGC login from a stack secret) and the
    # node extension points (an extra managed policy, inline statements, a hook)
    extended = copy.deepcopy(dev)
    extended["containers"] = {
        "ecr": True,
        "registry_credentials": [{"registry": "nvcr.io", "kind": "stack", "secret": "ngc", "login": "$oauthtoken"}],
    }
    extended["node_iam"] = {
        "managed_policy_arns": ["arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"],
        "statements": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::my-training-data/*"}],
    }
    extended["hooks"] = {"on_node_ready": {"script": "#!/bin/sh\ntrue\n"}}
    # the controller on its own on-demand CPU instance: its own template without EFA or
    # block, its own role (the same resource types, other names: iam:PassRole and the
    # role/profile scopes must cover `*-controller-role-*`)
    dedicated = copy.deepcopy(prod)
    dedicated["controller"] = {"placement": "dedicated"}
    # a team stack: accounting on RDS (a created VPC: its database subnet), users
    team = copy.deepcopy(dedicated)
    team["accounting"] = {"enabled": True}
    team["users"] = [{"name": "alice", "uid": 2001, "account": "physics"}]
    return {
        "dev": (dev, dev_region),
        "dev, deployed before (the live controller group is read)": (dev, dev_region),
        "dev with private registries and node extensions": (extended, dev_region),
        "prod": (prod, prod_region),
        "prod with a dedicated controller": (dedicated, prod_region),
        "prod with accounting and users": (team, prod_region),
        "on-demand, created VPC": (on_demand, prod_region),
        "PERSISTENT_1 with an S3 import path": (legacy, prod_region),
    }


@pytest.fixture(scope="module")
def rendered() -> dict[str, tuple[set[str], set[str]]]:
    """variant -> (resource types, invoke tokens) of its plan."""
    out = {}
    for name, (raw, region) in _variants().items():
        mocks = plan_mocks(raw, region)
        if "deployed before" in name:
            block = raw["capacity"]["capacity_blocks"][0]["name"]
            tags = [{"key": "GpuClusterBlock", "value": block, "propagateAtLaunch": True}]
            mocks.groups = {"gpu-cluster-dev-controller": {"desiredCapacity": 0, "tags": tags}}
        run_under_mocks(raw, region, mocks=mocks, secrets={"gpu-cluster:registry_password_ngc": "not-a-real-key"})
        out[name] = ({r["type"] for r in mocks.resources if r["custom"]}, {c["token"] for c in mocks.calls})
    return out


@pytest.fixture(scope="module")
def policy() -> dict:
    """Both documents' statements: what a deployer with both policies attached may do."""
    statements = [st for p in POLICIES for st in json.loads(p.read_text())["Statement"]]
    return {"Version": "2012-10-17", "Statement": statements}


# --- the file itself --------------------------------------------------------------------


def test_policy_is_a_valid_least_privilege_document(policy):
    assert policy["Version"] == "2012-10-17"
    assert set(policy) == {"Version", "Statement"}
    sids = [st["Sid"] for st in policy["Statement"]]
    assert len(sids) == len(set(sids)) and all(re.fullmatch(r"[A-Za-z0-9]+", s) for s in sids)
    for st in policy["Statement"]:
        assert st["Effect"] == "Allow" and "NotAction" not in st and "NotResource" not in st
        assert set(st) <= {"Sid", "Effect", "Action", "Resource", "Condition"}
        resources = [st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"]
        assert all(r == "*" or r.startswith("arn:aws:") for r in resources)
    actions = _allowed(policy)
    assert len(actions) == len({a.lower() for a in actions}) or _duplicates_are_in_separate_scopes(policy)
    for action in actions:
        assert action != "*" and re.fullmatch(r"[a-z0-9-]+:[A-Za-z0-9*]+", action), action
        service, _, name = action.partition(":")
        assert name != "*", f"{action}: a whole service"


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_each_policy_fits_in_one_managed_policy(path):
    """`aws iam create-policy` takes at most 6,144 characters, whitespace not counted [IAM-QUOTAS]."""
    doc = json.loads(path.read_text())
    assert doc["Version"] == "2012-10-17" and set(doc) == {"Version", "Statement"}
    assert len(re.sub(r"\s", "", path.read_text())) <= 6144


def _duplicates_are_in_separate_scopes(policy: dict) -> bool:
    """An action may appear twice only with different resources (e.g. iam:PutRolePolicy
    on the node role and on FSx's S3 service-linked role)."""
    seen: dict[str, list] = {}
    for st in policy["Statement"]:
        a = st["Action"]
        for action in [a] if isinstance(a, str) else a:
            seen.setdefault(action.lower(), []).append(json.dumps(st["Resource"], sort_keys=True))
    return all(len(r) == len(set(r)) for r in seen.values())


# IAM actions that are not API operation names: S3's own action names [S3-PERMS] and
# the permission-only iam:PassRole [IAM-PASSROLE].
IAM_ONLY = {
    "s3": {
        "GetAccelerateConfiguration",
        "GetEncryptionConfiguration",
        "GetLifecycleConfiguration",
        "GetReplicationConfiguration",
        "GetBucketObjectLockConfiguration",
        "GetBucketPublicAccessBlock",
        "PutBucketPublicAccessBlock",
        "ListBucket",
        "ListBucketVersions",
        "DeleteObjectVersion",
    },
    "iam": {"PassRole"},
}
# IAM service prefix -> botocore service name (they differ only for Service Quotas).
BOTOCORE_SERVICE = {"servicequotas": "service-quotas"}


@functools.cache
def _operations(service: str) -> frozenset[str]:
    model = botocore.session.get_session().get_service_model(BOTOCORE_SERVICE.get(service, service))
    return frozenset(model.operation_names)


@pytest.mark.parametrize(
    "actions",
    [
        pytest.param(lambda: [a for p in POLICIES for a in _allowed(json.loads(p.read_text()))], id="policy"),
        pytest.param(lambda: [a for row in PROGRAM_ACTIONS.values() for a in row], id="table"),
    ],
)
def test_every_action_names_a_real_operation(actions):
    """Against botocore's API models: a misspelt action would grant nothing, silently."""
    for action in actions():
        service, _, name = action.partition(":")
        ops = _operations(service) | IAM_ONLY.get(service, frozenset())
        assert any(fnmatch.fnmatchcase(op, name) for op in ops), f"{action}: no such {service} operation"


# --- the program ------------------------------------------------------------------------


def test_the_variants_cover_every_row_and_every_row_is_used(rendered):
    used = set().union(*(types | invokes for types, invokes in rendered.values()))
    assert used - PROGRAM_ACTIONS.keys() == set(), "a resource type or lookup without its IAM row"
    assert PROGRAM_ACTIONS.keys() - used == set(), "a row no rendered plan uses"
    assert "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation" in rendered["prod"][0]
    assert "aws:ec2/natGateway:NatGateway" in rendered["prod"][0]
    assert "aws:ec2/placementGroup:PlacementGroup" in rendered["on-demand, created VPC"][0]
    assert "aws:ec2/getSubnet:getSubnet" in rendered["dev"][1]


def test_policy_grants_every_action_of_every_rendered_resource_and_lookup(rendered, policy):
    missing = sorted(
        {
            f"{action} ({token}, {variant})"
            for variant, (types, invokes) in rendered.items()
            for token in types | invokes
            for action in PROGRAM_ACTIONS[token]
            if not granted(policy, action)
        }
    )
    assert missing == []


def test_granted_matches_exact_and_wildcard_actions_only_within_the_service(policy):
    assert granted(policy, "autoscaling:DescribeScalingActivities")  # autoscaling:Describe*
    assert granted(policy, "s3:GetBucketTagging")  # s3:GetBucket*
    assert not granted(policy, "ec2:PurchaseCapacityBlock")  # buying stays a human decision
    assert not granted(policy, "ec2:TerminateInstances")
    assert not granted(policy, "ssm:SendCommand")  # ops replace/status: the operator's role
    assert not granted(policy, "iam:CreateUser")


def test_accounting_grants_are_scoped_to_the_stacks_database_and_rds_managed_secrets(policy):
    for st in policy["Statement"]:
        actions = [st["Action"]] if isinstance(st["Action"], str) else st["Action"]
        resources = [st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"]
        if any(a.startswith("rds:") for a in actions):
            assert all(r.startswith("arn:aws:rds:*:*:") for r in resources), st["Sid"]
            assert all(":gpu-cluster-" in r or ":og:default:" in r for r in resources), st["Sid"]
        if any(a.startswith("secretsmanager:") for a in actions):
            assert resources == ["arn:aws:secretsmanager:*:*:secret:rds!*"], st["Sid"]
            assert "secretsmanager:GetSecretValue" not in actions  # the controller reads it, not the deployer


def test_log_and_dashboard_grants_are_scoped_to_the_programs_names(policy):
    """infra/logs.py names them `/gpu-cluster/<stack>` and `gpu-cluster-<stack>` (model/logs.py);
    only DescribeLogGroups, which reads names and settings, no events, takes no resource."""
    from model import logs

    assert logs.log_group_name("dev").startswith("/gpu-cluster/") and logs.dashboard_name("dev").startswith(
        "gpu-cluster-"
    )
    for st in policy["Statement"]:
        actions = [st["Action"]] if isinstance(st["Action"], str) else st["Action"]
        resources = [st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"]
        if actions == ["logs:DescribeLogGroups"]:
            assert resources == ["*"]
        elif any(a.startswith("logs:") for a in actions):
            assert resources == [
                "arn:aws:logs:*:*:log-group:/gpu-cluster/*",
                "arn:aws:logs:*:*:log-group:/gpu-cluster/*:*",
            ]
            assert not {"logs:PutLogEvents", "logs:CreateLogStream"} & set(
                actions
            )  # the nodes' grant, not the deployer's
        if any(a.startswith("cloudwatch:") for a in actions):
            assert resources == ["arn:aws:cloudwatch::*:dashboard/gpu-cluster-*"], st["Sid"]
            assert "cloudwatch:PutMetricData" not in actions


def test_iam_writes_are_scoped_to_the_node_role_and_service_linked_roles(policy):
    for st in policy["Statement"]:
        actions = [st["Action"]] if isinstance(st["Action"], str) else st["Action"]
        if any(a.startswith("iam:") for a in actions):
            resources = [st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"]
            assert "*" not in resources, st["Sid"]
            if "iam:AttachRolePolicy" in actions and "aws-service-role" not in resources[0]:
                assert st["Condition"] == {
                    "ArnEquals": {"iam:PolicyARN": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"}
                }


def test_the_deployer_may_write_the_controllers_topology_policy(policy):
    """slurm.topology tree: the controller's `ec2:DescribeInstanceTopology` grant is its own
    RolePolicy on the controller's role (infra/iam.py); every IAM call the provider makes
    for it must reach that role's ARN, as the plan names it."""
    raw, region = load_stack_config("dev")
    mocks = plan_mocks(raw, region)
    run_under_mocks(raw, region, mocks=mocks)
    rp = next(r for r in mocks.resources if r["name"] == "dev-controller-topology")
    assert rp["type"] == "aws:iam/rolePolicy:RolePolicy"
    assert json.loads(rp["inputs"]["policy"])["Statement"][0]["Action"] == "ec2:DescribeInstanceTopology"
    arn = f"arn:aws:iam::123456789012:role/{rp['inputs']['role']}"
    for action in PROGRAM_ACTIONS["aws:iam/rolePolicy:RolePolicy"]:
        reach = [
            st["Sid"]
            for st in policy["Statement"]
            if action in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
            and any(
                fnmatch.fnmatchcase(arn, res)
                for res in ([st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"])
            )
        ]
        assert reach, f"{action} on {arn}: no statement grants it"


def test_ssm_writes_are_scoped_to_the_stacks_own_parameters(policy):
    """The deployer writes only the parameters the program names (`/gpu-cluster/<cluster>/
    registry/<secret>`, model/registries.py); DescribeParameters has no resource scope."""
    from model.registries import stack_parameter_name

    for st in policy["Statement"]:
        actions = [st["Action"]] if isinstance(st["Action"], str) else st["Action"]
        if "ssm:PutParameter" in actions:
            assert st["Resource"] == "arn:aws:ssm:*:*:parameter/gpu-cluster/*"
            assert fnmatch.fnmatchcase("parameter" + stack_parameter_name("dev", "ngc"), "parameter/gpu-cluster/*")


# --- ops: record what the commands call ----------------------------------------------------


def test_ops_reads_are_granted(tmp_path, policy):
    from tests.support import block_offerings as blocks
    from tests.support import pin_stubs as pin
    from tests.support import preflight_account as pf

    aws = RecordingAws()
    pf.stub_account(aws)
    ctx = context(aws)
    (tmp_path / "pf").mkdir()
    root = pf.write_stack(tmp_path / "pf")
    assert ops_main(["preflight", "--stack", "dev", "--stack-dir", str(root)], ctx=ctx, session_for=aws.session) == 0

    stack = tmp_path / "pin"
    stack.mkdir()
    shutil.copy(REPO / "Pulumi.dev.yaml", stack / "Pulumi.dev.yaml")
    pin.stub_image(aws)
    pin.stub_fsx(aws, [pin.file_system()])
    for what in ("--image", "--fsx"):
        ctx = context(aws)
        assert (
            ops_main(["pin", what, "--stack", "dev", "--stack-dir", str(stack)], ctx=ctx, session_for=aws.session) == 0
        )

    blocks.stub_offerings(aws)
    ctx = context(aws)
    assert ops_main(blocks.ARGS, ctx=ctx, session_for=aws.session) == 0

    from tests.support import log_streams as logs

    logs.stub_streams(aws)
    logs.stub_events(aws, sorted(logs.streams()), [])
    ctx = context(aws)
    assert (
        ops_main(["logs", logs.NODE, "--stack", "dev", "--stack-dir", str(stack)], ctx=ctx, session_for=aws.session)
        == 0
    )
    aws.done()

    assert {
        "ec2:DescribeCapacityReservations",
        "ec2:DescribeCapacityBlockOfferings",
        "ssm:GetParameter",
        "fsx:DescribeFileSystems",
        "servicequotas:GetServiceQuota",
        "autoscaling:DescribeAutoScalingGroups",
        "logs:DescribeLogStreams",
        "logs:FilterLogEvents",
    } <= aws.actions
    assert sorted(a for a in aws.actions if not granted(policy, a)) == []
