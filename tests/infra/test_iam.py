"""Node identity: EC2 role with SSM core, instance profile, optional payload read."""

from __future__ import annotations

import json

import pulumi

from infra.iam import SSM_CORE_POLICY_ARN, NodeIdentity, NodeIdentityArgs
from tests.support.mocks import run_component

ROLE = "aws:iam/role:Role"
ATTACH = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
PROFILE = "aws:iam/instanceProfile:InstanceProfile"
POLICY = "aws:iam/rolePolicy:RolePolicy"
TAGS = {"GpuClusterName": "c1"}


def _run(payload_arn=None):
    def program():
        ident = NodeIdentity("c1", NodeIdentityArgs(cluster_name="c1", payload_object_arn=payload_arn, tags=TAGS))
        return pulumi.Output.all(ident.role_name, ident.instance_profile_name, ident.instance_profile_arn)

    return run_component(program)


def test_role_profile_and_ssm_only():
    run = _run()
    assert run.custom() == [(PROFILE, "c1-profile"), (ROLE, "c1-role"), (ATTACH, "c1-ssm")]
    role = run.inputs(ROLE, "c1-role")
    assume = json.loads(role["assumeRolePolicy"])
    assert assume["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}}
    ]
    assert "managedPolicyArns" not in role and "inlinePolicies" not in role
    assert role["tags"] == TAGS
    role_name, profile_name, profile_arn = run.value
    attach = run.inputs(ATTACH, "c1-ssm")
    assert attach == {"role": role_name, "policyArn": SSM_CORE_POLICY_ARN}
    assert run.inputs(PROFILE, "c1-profile")["role"] == role_name
    assert profile_arn.endswith(f"instance-profile/{profile_name}")
    for typ, name in run.custom():
        assert run.parent_type(typ, name) == "gpu-cluster:index:NodeIdentity"


def test_payload_object_read_only():
    arn = "arn:aws:s3:::bucket-1/payload/abc.tar.gz"
    run = _run(arn)
    policy = json.loads(run.inputs(POLICY, "c1-payload")["policy"])
    assert policy["Statement"] == [{"Action": "s3:GetObject", "Effect": "Allow", "Resource": arn}]
