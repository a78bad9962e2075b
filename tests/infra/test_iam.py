"""Node identity: EC2 role with SSM core, instance profile, optional payload read."""

from __future__ import annotations

import json

import pulumi

from infra.iam import SSM_CORE_POLICY_ARN, NodeIdentity, NodeIdentityArgs, object_read_policy
from tests.support.mocks import run_component

ROLE = "aws:iam/role:Role"
ATTACH = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
PROFILE = "aws:iam/instanceProfile:InstanceProfile"
POLICY = "aws:iam/rolePolicy:RolePolicy"
TAGS = {"GpuClusterName": "c1"}


def _run(payload_arn=None, own=None):
    def program():
        args = NodeIdentityArgs(cluster_name="c1", payload_object_arn=payload_arn, own_policies=own or {}, tags=TAGS)
        ident = NodeIdentity("c1", args)
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


def test_block_ends_read_is_its_own_named_policy_on_exactly_that_object():
    """How the program gives the controller's role alone the block-ends read (infra/cluster.py)."""
    payload, ends = "arn:aws:s3:::bucket-1/payload/abc.tar.gz", "arn:aws:s3:::bucket-1/blocks/ends.json"
    run = _run(payload, {"block-ends": object_read_policy(ends)})
    assert run.custom() == [
        (PROFILE, "c1-profile"),
        (ROLE, "c1-role"),
        (POLICY, "c1-block-ends"),
        (POLICY, "c1-payload"),
        (ATTACH, "c1-ssm"),
    ]
    for name, arn in (("c1-payload", payload), ("c1-block-ends", ends)):
        assert json.loads(run.inputs(POLICY, name)["policy"]) == {
            "Version": "2012-10-17",
            "Statement": [{"Action": "s3:GetObject", "Effect": "Allow", "Resource": arn}],
        }
        assert run.inputs(POLICY, name)["role"] == run.value[0]


def test_repair_policy_is_exactly_terminate_on_this_clusters_worker_groups():
    """The controller's one AWS write (nodeside/repair.py): by group ARN and by tags."""
    from infra.iam import repair_policy

    assert json.loads(repair_policy("demo", "us-east-2", "gpu-cluster-dev")) == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReplaceThisClustersWorkers",
                "Effect": "Allow",
                "Action": "autoscaling:TerminateInstanceInAutoScalingGroup",
                "Resource": "arn:aws:autoscaling:us-east-2:*:autoScalingGroup:*:autoScalingGroupName/gpu-cluster-dev-*",
                "Condition": {
                    "StringEquals": {
                        "autoscaling:ResourceTag/GpuClusterName": "demo",
                        "autoscaling:ResourceTag/GpuClusterRole": "worker",
                    }
                },
            }
        ],
    }


def _program_policies(repair: dict | None):
    from tests.support.mocks import run_program, stack_config

    raw, region = stack_config("dev")
    if repair is not None:
        raw["repair"] = repair
    run = run_program(raw, region)
    return run, {r["name"]: r for r in run.of_type(POLICY)}


def test_only_the_controller_role_may_replace_and_only_under_a_replacing_policy():
    from infra.iam import repair_policy

    run, policies = _program_policies(None)  # repair.policy defaults to auto
    # (and the topology read, slurm.topology tree: tests/infra/test_program.py)
    logs = ["dev-controller-logs", "dev-controller-metrics", "dev-logs"]
    assert sorted(policies) == sorted(
        [
            *logs,
            "dev-controller-block-ends",
            "dev-controller-payload",
            "dev-controller-repair",
            "dev-controller-topology",
            "dev-payload",
        ]
    )
    repair = run.inputs(POLICY, "dev-controller-repair")
    assert repair["policy"] == repair_policy("dev", "us-east-2", "gpu-cluster-dev")
    assert repair["role"].startswith("dev-controller-role")
    for mode in ("isolate", "none"):
        _, policies = _program_policies({"policy": mode})
        assert sorted(policies) == sorted(
            [*logs, "dev-controller-block-ends", "dev-controller-payload", "dev-controller-topology", "dev-payload"]
        ), mode
