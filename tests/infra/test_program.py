"""The whole program per stack file, under the render's mocks."""

from __future__ import annotations

import base64
import gzip
import json

import pulumi
import pytest

from tests.support.mocks import run_program, stack_config

LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
FS = "aws:fsx/lustreFileSystem:LustreFileSystem"
SG = "aws:ec2/securityGroup:SecurityGroup"
SCHED = "aws:autoscaling/schedule:Schedule"


@pytest.fixture(scope="module")
def dev():
    raw, region = stack_config("dev")
    return run_program(raw, region)


@pytest.fixture(scope="module")
def prod():
    raw, region = stack_config("prod")
    return run_program(raw, region)


def test_dev_resources(dev):
    assert dev.custom() == [
        ("aws:autoscaling/group:Group", "dev-block-a"),
        ("aws:autoscaling/group:Group", "dev-controller"),
        ("aws:autoscaling/schedule:Schedule", "dev-block-a-scale-in"),
        ("aws:autoscaling/schedule:Schedule", "dev-block-a-scale-out"),
        ("aws:autoscaling/schedule:Schedule", "dev-controller-scale-in"),
        ("aws:autoscaling/schedule:Schedule", "dev-controller-scale-out"),
        ("aws:cloudwatch/dashboard:Dashboard", "dev-dashboard"),
        ("aws:cloudwatch/logGroup:LogGroup", "dev-logs"),
        ("aws:ec2/launchTemplate:LaunchTemplate", "dev-controller-lt"),
        ("aws:ec2/launchTemplate:LaunchTemplate", "dev-lt"),
        ("aws:ec2/securityGroup:SecurityGroup", "dev-sg"),
        ("aws:fsx/lustreFileSystem:LustreFileSystem", "dev-lustre"),
        ("aws:iam/instanceProfile:InstanceProfile", "dev-controller-profile"),
        ("aws:iam/instanceProfile:InstanceProfile", "dev-profile"),
        ("aws:iam/role:Role", "dev-controller-role"),
        ("aws:iam/role:Role", "dev-role"),
        ("aws:iam/rolePolicy:RolePolicy", "dev-controller-block-ends"),
        ("aws:iam/rolePolicy:RolePolicy", "dev-controller-logs"),
        ("aws:iam/rolePolicy:RolePolicy", "dev-controller-metrics"),
        ("aws:iam/rolePolicy:RolePolicy", "dev-controller-payload"),
        ("aws:iam/rolePolicy:RolePolicy", "dev-controller-repair"),
        ("aws:iam/rolePolicy:RolePolicy", "dev-controller-topology"),
        ("aws:iam/rolePolicy:RolePolicy", "dev-logs"),
        ("aws:iam/rolePolicy:RolePolicy", "dev-payload"),
        ("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "dev-controller-ssm"),
        ("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "dev-ssm"),
        ("aws:s3/bucket:Bucket", "dev-payload"),
        ("aws:s3/bucketObjectv2:BucketObjectv2", "dev-block-ends"),
        ("aws:s3/bucketObjectv2:BucketObjectv2", "dev-payload"),
        ("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "dev-payload"),
        ("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule", "dev-internet-tcp443"),
        ("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule", "dev-internet-tcp80"),
        ("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule", "dev-self-out"),
        ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "dev-self-in"),
    ]
    components = sorted((r["type"], r["name"]) for r in dev.resources if not r["custom"])
    assert components == [
        ("gpu-cluster:index:BlockEndsObject", "dev"),
        ("gpu-cluster:index:ClusterLogs", "dev"),
        ("gpu-cluster:index:FileSystem", "dev"),
        ("gpu-cluster:index:Network", "dev"),
        ("gpu-cluster:index:NodeGroups", "dev"),
        ("gpu-cluster:index:NodeIdentity", "dev"),
        ("gpu-cluster:index:NodeIdentity", "dev-controller"),
        ("gpu-cluster:index:NodeLaunchTemplate", "dev"),
        ("gpu-cluster:index:NodeLaunchTemplate", "dev-controller"),
        ("gpu-cluster:index:NodeSecurityGroup", "dev"),
        ("gpu-cluster:index:PayloadBucket", "dev"),
        ("gpu-cluster:index:PayloadObject", "dev"),
    ]


def test_dev_wiring(dev):
    sg_id = dev.value["security_group_id"]
    subnet = "subnet-0a1b2c3d4e5f60718"
    assert dev.inputs(SG, "dev-sg")["vpcId"] == "vpc-0a1b2c3d4e5f60718"  # from the subnet lookup
    fs = dev.inputs(FS, "dev-lustre")
    assert fs["deploymentType"] == "PERSISTENT_2" and fs["subnetIds"] == subnet and fs["securityGroupIds"] == [sg_id]
    lt = dev.inputs(LT, "dev-lt")
    assert len(lt["networkInterfaces"]) == 33
    assert {n["securityGroups"][0] for n in lt["networkInterfaces"]} == {sg_id}
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt["iamInstanceProfile"]["arn"].startswith("arn:aws:iam::123456789012:instance-profile/dev-profile")
    for name, role, size in (("dev-controller", "controller", 1), ("dev-block-a", "worker", 1)):
        asg = dev.inputs(ASG, name)
        lt_key = "controller_launch_template_id" if role == "controller" else "launch_template_id"
        assert asg["launchTemplate"] == {"id": dev.value[lt_key], "version": "1"}
        assert asg["vpcZoneIdentifiers"] == [subnet]
        assert asg["capacityReservationSpecification"]["capacityReservationTarget"] == {
            "capacityReservationIds": ["cr-0123456789abcdef0"]
        }
        tags = {t["key"]: t["value"] for t in asg["tags"]}
        assert (tags["GpuClusterRole"], tags["GpuClusterNodes"], tags["GpuClusterBlock"]) == (role, "2", "a")
        assert tags["GpuClusterBlockEnd"] == "2026-12-08T11:30:00Z"
        # The plan runs before the block starts (PLAN_NOW): zero now, the size at the start.
        assert (asg["minSize"], asg["maxSize"], asg["desiredCapacity"]) == (0, 0, 0)
        out = dev.inputs(SCHED, f"{name}-scale-out")
        assert (out["autoscalingGroupName"], out["startTime"], out["desiredCapacity"], out["maxSize"]) == (
            f"gpu-cluster-{name}",
            "2026-12-01T11:30:00Z",
            size,
            size,
        )
        stop = dev.inputs(SCHED, f"{name}-scale-in")
        assert (stop["startTime"], stop["minSize"], stop["maxSize"], stop["desiredCapacity"]) == (
            "2026-12-08T10:50:00Z",
            0,
            0,
            0,
        )
    assert lt["imageId"] == "ami-0a1b2c3d4e5f60718"  # pinned, never resolve:ssm: in dev


def test_dev_user_data_is_the_rendered_bytes(dev):
    lt = dev.inputs(LT, "dev-lt")
    assert base64.b64decode(lt["userData"]) == dev.node_files.user_data
    assert len(dev.node_files.user_data) <= 16 * 1024  # EC2 limit before base64 [EC2-UD]


def test_dev_payload_object_and_its_only_reader(dev):
    """The node files outgrow inline user data: one object, readable by the node roles only
    (the published block ends beside it, by the controller's alone: tests/infra/test_block_ends.py)."""
    sha, tar = dev.node_files.s3_payload
    bucket = dev.value["user_data_payload_bucket"]
    obj = dev.inputs("aws:s3/bucketObjectv2:BucketObjectv2", "dev-payload")
    assert obj["bucket"] == bucket and obj["key"] == f"payload/{sha}.tar.gz"
    assert base64.b64decode(obj["contentBase64"]) == tar
    for role in ("dev", "dev-controller"):
        policy = json.loads(dev.inputs("aws:iam/rolePolicy:RolePolicy", f"{role}-payload")["policy"])
        assert policy["Statement"] == [
            {"Action": "s3:GetObject", "Effect": "Allow", "Resource": f"arn:aws:s3:::{bucket}/payload/{sha}.tar.gz"}
        ]
    boot = gzip.decompress(dev.node_files.user_data)
    assert f"s3://{bucket}/payload/{sha}.tar.gz".encode() in boot


def test_dev_outputs(dev):
    out = dev.value
    assert out["controller_asg_name"] == "gpu-cluster-dev-controller"
    assert out["controller_instance_id_command"] == (
        "aws autoscaling describe-auto-scaling-groups --region us-east-2 "
        "--auto-scaling-group-names gpu-cluster-dev-controller "
        "--query \"AutoScalingGroups[0].Instances[?LifecycleState=='InService'] | [0].InstanceId\" --output text"
    )
    assert out["controller_ssm_command"] == (
        f"aws ssm start-session --region us-east-2 --target $({out['controller_instance_id_command']})"
    )
    assert out["fsx_dns_name"] == "fs-0123456789abcdef0.fsx.us-east-2.amazonaws.com"
    assert out["fsx_mount_name"] == "abcdefgh"
    assert out["launch_template_id"].startswith("lt-") and out["launch_template_version"] == 1
    assert sorted(out["node_groups"]) == ["block-a", "controller"]
    assert out["node_groups"]["controller"] == {
        "asg_name": "gpu-cluster-dev-controller",
        "role": "controller",
        "size": 1,
        "block": "a",
        "capacity_block_id": "cr-0123456789abcdef0",
        "size_now": 0,
        "block_start": "2026-12-01T11:30:00Z",
        "block_end": "2026-12-08T11:30:00Z",
        "scale_out_at": "2026-12-01T11:30:00Z",
        "scale_in_at": "2026-12-08T10:50:00Z",
    }
    assert out["fsx_identity"] == {
        "cluster_name": "dev",
        "deployment_type": "PERSISTENT_2",
        "storage_type": "SSD",
        "file_system_type_version": "2.15",
        "subnet": "subnet-0a1b2c3d4e5f60718",
        "storage_capacity_gib": 1200,
        "copy_tags_to_backups": True,
        "s3_import_path": None,
    }
    assert out["fsx_protected"] is True and out["image_id"] == "ami-0a1b2c3d4e5f60718"
    assert out["capacity_block_ids"] == ["cr-0123456789abcdef0"]
    assert out["validation_results_path"] == "/fsx/.gpu-cluster/dev/validation/"


def test_prod_resources(prod):
    custom = prod.custom()
    assert [n for t, n in custom if t == LT] == ["prod-controller-lt", "prod-lt"]
    assert [n for t, n in custom if t == ASG] == ["prod-block-a", "prod-block-b", "prod-controller"]
    assert ("aws:ec2/natGateway:NatGateway", "prod-nat") in custom
    assert ("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation", "prod-s3") in custom
    # 13 network, 5 security group, 2 FSx, 3 payload, 14 IAM (workers' and controller's
    # role, profile, payload policy, logs policy, SSM attachment; the controller's block-ends,
    # repair, topology-read and metrics policies), 2 templates (workers', controller's),
    # 3 groups, 6 scheduled actions (prod's blocks start after PLAN_NOW: scale out and in per group),
    # 1 published block-ends object (blocks/ends.json), 2 CloudWatch (log group, dashboard)
    assert len(custom) == 51


def test_prod_blocks_and_sizes(prod):
    lt = prod.inputs(LT, "prod-lt")
    assert len(lt["networkInterfaces"]) == 17  # p5en: 16 cards
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt["blockDeviceMappings"][0]["ebs"]["volumeSize"] == 1024
    sizes = {n: prod.inputs(ASG, f"prod-{n}") for n in ("controller", "block-a", "block-b")}
    assert {n: a["desiredCapacity"] for n, a in sizes.items()} == {"controller": 0, "block-a": 0, "block-b": 0}
    assert {n: prod.inputs(SCHED, f"prod-{n}-scale-out")["desiredCapacity"] for n in sizes} == {
        "controller": 1,
        "block-a": 7,
        "block-b": 8,
    }
    assert {n: a["launchTemplate"]["id"] for n, a in sizes.items()} == {
        "controller": prod.value["controller_launch_template_id"],
        "block-a": prod.value["launch_template_id"],
        "block-b": prod.value["launch_template_id"],
    }
    assert {
        n: a["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationIds"]
        for n, a in sizes.items()
    } == {
        "controller": ["cr-0aaaaaaaaaaaaaaa1"],
        "block-a": ["cr-0aaaaaaaaaaaaaaa1"],
        "block-b": ["cr-0bbbbbbbbbbbbbbb2"],
    }
    private = prod.inputs("aws:ec2/subnet:Subnet", "prod-private")
    assert prod.value["subnet_id"] in {a["vpcZoneIdentifiers"][0] for a in sizes.values()}
    assert private["availabilityZone"] == "us-east-1a"
    assert prod.inputs(FS, "prod-lustre")["storageCapacity"] == 9600
    assert prod.value["capacity_block_ids"] == ["cr-0aaaaaaaaaaaaaaa1", "cr-0bbbbbbbbbbbbbbb2"]


def test_on_demand_program():
    raw, region = stack_config("dev")
    raw["capacity"] = {"nodes": 4}
    run = run_program(raw, region)
    assert [n for t, n in run.custom() if t in (LT, ASG, "aws:ec2/placementGroup:PlacementGroup")] == [
        "dev-controller",
        "dev-workers",
        "dev-controller-lt",
        "dev-lt",
        "dev-pg",
    ]
    lt = run.inputs(LT, "dev-lt")
    assert "instanceMarketOptions" not in lt and lt["placement"]["groupName"].startswith("dev-pg")
    # the colocated controller joins the workers' placement group (no second one)
    ctl = run.inputs(LT, "dev-controller-lt")
    assert ctl["placement"] == lt["placement"] and "instanceMarketOptions" not in ctl
    assert ctl["networkInterfaces"] == lt["networkInterfaces"] and ctl["instanceType"] == "p5.48xlarge"
    workers = run.inputs(ASG, "dev-workers")
    assert workers["desiredCapacity"] == 3 and "capacityReservationSpecification" not in workers
    assert run.value["capacity_block_ids"] == []


def test_bad_config_raises_run_error_before_resources():
    raw, region = stack_config("dev")
    raw["capacity"]["nodes"] = 3
    with pytest.raises(pulumi.RunError) as exc:
        run_program(raw, region)
    assert str(exc.value) == (
        "gpu-cluster:cluster.capacity.nodes: 3 nodes requested but the capacity blocks "
        "hold 2; lower capacity.nodes or add a block"
    )


def test_subnet_in_wrong_az_fails_before_resources():
    raw, region = stack_config("dev")
    with pytest.raises(pulumi.RunError) as exc:
        run_program(raw, region, subnet_az="us-east-2a")
    assert str(exc.value).startswith("gpu-cluster:cluster.network.subnet_id: subnet-0a1b2c3d4e5f60718 is in us-east-2a")


def test_missing_region_is_a_config_error():
    raw, _ = stack_config("dev")
    with pytest.raises(pulumi.RunError) as exc:
        run_program(raw, region=None)
    assert str(exc.value).startswith("aws:region: required")


def test_main_exports_every_output():
    """`pulumi up` runs infra.stack.main(): every BuildResult output becomes a stack output."""
    import json as _json

    from pulumi.runtime.settings import get_root_resource

    from offline.mocks import PLAN_NOW, PlanMocks, declared_blocks, run_with_mocks

    raw, region = stack_config("dev")
    # main() is `pulumi up`: it refuses the shipped file's example ids (model/placeholders.py).
    text = _json.dumps(raw)
    for example, mine in (
        ("subnet-0a1b2c3d4e5f60718", "subnet-07e3c41b9d2a58f60"),
        ("cr-0123456789abcdef0", "cr-05d1e9a3c7b24f681"),
        ("ami-0a1b2c3d4e5f60718", "ami-04c7e1b95a3d2f806"),
    ):
        text = text.replace(example, mine)
    raw = _json.loads(text)

    def program():
        from infra.stack import main

        main(now=PLAN_NOW)
        return pulumi.Output.from_input(sorted(get_root_resource().outputs))

    exported, _ = run_with_mocks(
        program,
        PlanMocks(region, subnet_az="us-east-2b", blocks=declared_blocks(raw)),
        config={"gpu-cluster:cluster": _json.dumps(raw), "aws:region": region},
    )
    assert exported == sorted(
        [
            "block_ends_uri",
            "capacity_block_ids",
            "cluster_name",
            "controller_asg_name",
            "controller_instance_id_command",
            "controller_launch_template_id",
            "controller_launch_template_version",
            "controller_placement",
            "controller_role_name",
            "controller_ssm_command",
            "fsx_dns_name",
            "fsx_identity",
            "fsx_mount_name",
            "fsx_protected",
            "image_id",
            "launch_template_id",
            "launch_template_version",
            "logs",
            "node_groups",
            "region",
            "security_group_id",
            "subnet_id",
            "user_data_payload_bucket",
            "validation_results_path",
        ]
    )


def test_node_count_changes_groups_not_templates_or_user_data(dev):
    """1024 nodes in 16 blocks: 17 groups, still one template with the dev user data."""
    raw, region = stack_config("dev")
    raw["capacity"] = {
        "nodes": 1024,
        "capacity_blocks": [
            {
                "name": f"b{i:02d}",
                "reservation_id": f"cr-{i:017x}",
                "instance_count": 64,
                "availability_zone": "us-east-2b",
                "start": "2026-11-30T11:30:00Z",
                "end": "2026-12-07T11:30:00Z",
            }
            for i in range(16)
        ],
    }
    raw["controller"] = {"block": "b00"}
    big = run_program(raw, region)
    asgs = big.of_type(ASG)
    assert len(asgs) == 17 and len(big.of_type(LT)) == 2  # the workers' and the controller's
    assert sum(a["inputs"]["desiredCapacity"] for a in asgs) == 1024  # started: full size now
    assert len(big.of_type(SCHED)) == 17  # one scale-in each, no scale-out
    assert {
        a["inputs"]["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationIds"][0]
        for a in asgs
    } == {f"cr-{i:017x}" for i in range(16)}
    assert big.inputs(LT, "dev-lt")["userData"] == dev.inputs(LT, "dev-lt")["userData"]


def test_dev_controller_has_its_own_template_and_role_with_the_workers_settings(dev):
    """controller.placement block (default): the controller's template differs from the
    workers' only by its name, description and instance profile (D4: its own role)."""
    workers, ctl = dev.inputs(LT, "dev-lt"), dev.inputs(LT, "dev-controller-lt")
    assert ctl["name"] == "gpu-cluster-dev-controller" and workers["name"] == "gpu-cluster-dev"
    assert ctl["description"] == "gpu-cluster dev p5.48xlarge controller"
    assert ctl["iamInstanceProfile"]["arn"].startswith(
        "arn:aws:iam::123456789012:instance-profile/dev-controller-profile"
    )
    same = {k: v for k, v in ctl.items() if k not in ("name", "description", "iamInstanceProfile")}
    assert same == {k: v for k, v in workers.items() if k not in ("name", "description", "iamInstanceProfile")}
    role = dev.inputs("aws:iam/role:Role", "dev-controller-role")
    assert role["description"] == "gpu-cluster dev controller (SSM access, replaces failed workers)"
    assert dev.inputs("aws:iam/role:Role", "dev-role")["description"] == "gpu-cluster dev GPU nodes (SSM access only)"
    # today's node grants on both roles: SSM and the payload object
    for who in ("dev", "dev-controller"):
        ssm = dev.inputs("aws:iam/rolePolicyAttachment:RolePolicyAttachment", f"{who}-ssm")
        assert ssm["policyArn"] == "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
        assert ssm["role"].startswith(f"{who}-role")
    assert dev.value["controller_placement"] == "block"


def test_only_the_controller_reads_the_instance_topology_and_nothing_else(dev):
    """slurm.topology tree (default): the controller's role, and only it, gets exactly
    ec2:DescribeInstanceTopology, on "*" (the action has no resource type to scope to),
    as its own RolePolicy; `none` drops it."""
    policy = dev.inputs("aws:iam/rolePolicy:RolePolicy", "dev-controller-topology")
    assert policy["role"].startswith("dev-controller-role")
    assert json.loads(policy["policy"]) == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReadInstanceTopology",
                "Effect": "Allow",
                "Action": "ec2:DescribeInstanceTopology",
                "Resource": "*",
            }
        ],
    }
    worker_grants = [
        json.loads(r["inputs"]["policy"])
        for r in dev.resources
        if r["type"] == "aws:iam/rolePolicy:RolePolicy" and not r["name"].startswith("dev-controller")
    ]
    assert "DescribeInstanceTopology" not in json.dumps(worker_grants)
    raw, region = stack_config("dev")
    raw["slurm"] = {"topology": "none"}
    names = [name for typ, name in run_program(raw, region).custom() if typ == "aws:iam/rolePolicy:RolePolicy"]
    assert sorted(names) == [
        "dev-controller-block-ends",
        "dev-controller-logs",
        "dev-controller-metrics",
        "dev-controller-payload",
        "dev-controller-repair",
        "dev-logs",
        "dev-payload",
    ]


@pytest.fixture(scope="module")
def dedicated():
    raw, region = stack_config("dev")
    raw["controller"] = {"placement": "dedicated"}
    return run_program(raw, region)


def test_dedicated_controller_template(dev, dedicated):
    """controller.placement dedicated: a small on-demand CPU instance; same image, user
    data, root volume, metadata options and tags; one plain interface; no market options,
    no placement."""
    ctl, workers = dedicated.inputs(LT, "dev-controller-lt"), dedicated.inputs(LT, "dev-lt")
    assert ctl["instanceType"] == "m7i.xlarge"
    assert ctl["description"] == "gpu-cluster dev m7i.xlarge controller"
    assert ctl["networkInterfaces"] == [
        {"deviceIndex": 0, "securityGroups": [dedicated.value["security_group_id"]], "deleteOnTermination": "true"}
    ]
    assert "instanceMarketOptions" not in ctl and "placement" not in ctl
    for key in ("imageId", "userData", "blockDeviceMappings", "metadataOptions", "tagSpecifications", "tags"):
        assert ctl[key] == workers[key], key
    # the workers' template is the default placement's but for the user data, which says
    # CONTROLLER_DEDICATED=1 in cluster.env (one rendering for every node)
    own = ("iamInstanceProfile", "userData")
    assert {k: v for k, v in workers.items() if k not in own} == {
        k: v for k, v in dev.inputs(LT, "dev-lt").items() if k not in own
    }
    assert workers["userData"] != dev.inputs(LT, "dev-lt")["userData"]


def test_dedicated_controller_group_and_block_sizes(dedicated):
    ctl = dedicated.inputs(ASG, "dev-controller")
    assert "capacityReservationSpecification" not in ctl
    assert ctl["launchTemplate"] == {"id": dedicated.value["controller_launch_template_id"], "version": "1"}
    assert (ctl["minSize"], ctl["maxSize"], ctl["desiredCapacity"]) == (1, 1, 1)  # on demand: now
    assert ctl["vpcZoneIdentifiers"] == ["subnet-0a1b2c3d4e5f60718"]
    tags = {t["key"]: t["value"] for t in ctl["tags"]}
    assert (tags["GpuClusterRole"], tags["GpuClusterBlock"], tags["GpuClusterNodes"]) == (
        "controller",
        "on-demand",
        "2",
    )
    assert "GpuClusterBlockEnd" not in tags
    # the block keeps both of its nodes, and only its own group follows its dates
    block = dedicated.inputs(ASG, "dev-block-a")
    assert dedicated.inputs(SCHED, "dev-block-a-scale-out")["desiredCapacity"] == 2
    assert block["launchTemplate"]["id"] == dedicated.value["launch_template_id"]
    assert sorted(n for t, n in dedicated.custom() if t == SCHED) == ["dev-block-a-scale-in", "dev-block-a-scale-out"]
    assert dedicated.value["controller_placement"] == "dedicated"
    assert dedicated.value["node_groups"]["controller"]["block"] == "on-demand"
