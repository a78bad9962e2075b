"""Launch template component: EFA interfaces, IMDS, root volume, market/placement."""

from __future__ import annotations

import base64

import pulumi
import pytest

from infra.launch_template import NodeLaunchTemplate, NodeLaunchTemplateArgs, image_id
from model.catalog import CATALOG
from model.config import parse_config
from model.root_volume import RootVolumeConfig
from tests.support.mocks import run_component, valid_raw

LT = "aws:ec2/launchTemplate:LaunchTemplate"
PG = "aws:ec2/placementGroup:PlacementGroup"
TAGS = {"GpuClusterName": "c1", "team": "ml"}
USER_DATA = base64.b64encode(b"#!/bin/sh\n").decode()


def _run(instance_type="p5.48xlarge", capacity_blocks=True, placement_group=False):
    def program():
        lt = NodeLaunchTemplate(
            "c1",
            NodeLaunchTemplateArgs(
                cluster_name="c1",
                spec=CATALOG[instance_type],
                image_id="resolve:ssm:/aws/service/x",
                security_group_id="sg-0abc",
                instance_profile_arn="arn:aws:iam::123456789012:instance-profile/p",
                user_data_base64=USER_DATA,
                root_volume=RootVolumeConfig(size_gib=700),
                capacity_blocks=capacity_blocks,
                placement_group=placement_group,
                tags=TAGS,
            ),
        )
        return pulumi.Output.all(lt.launch_template_id, lt.latest_version)

    return run_component(program)


@pytest.fixture(scope="module")
def block_lt():
    return _run()


def test_children_and_names(block_lt):
    assert block_lt.custom() == [(LT, "c1-lt")]
    assert block_lt.parent_type(LT, "c1-lt") == "gpu-cluster:index:NodeLaunchTemplate"
    lt = block_lt.inputs(LT, "c1-lt")
    assert lt["name"] == "gpu-cluster-c1"
    assert lt["instanceType"] == "p5.48xlarge"
    assert lt["imageId"] == "resolve:ssm:/aws/service/x"
    assert lt["updateDefaultVersion"] is True
    assert block_lt.value[1] == 1


def test_p5_interfaces(block_lt):
    nis = block_lt.inputs(LT, "c1-lt")["networkInterfaces"]
    assert len(nis) == 33
    assert [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in nis] == (
        [(0, 0, "interface"), (0, 1, "efa-only")] + [(c, 0, "efa-only") for c in range(1, 32)]
    )
    for n in nis:
        assert n["securityGroups"] == ["sg-0abc"]
        assert n["deleteOnTermination"] == "true"
        # The Auto Scaling group supplies the subnet; no public IPs on multi-NIC nodes.
        assert "subnetId" not in n and "associatePublicIpAddress" not in n


def test_no_instance_level_groups_or_ssh_key(block_lt):
    lt = block_lt.inputs(LT, "c1-lt")
    assert "vpcSecurityGroupIds" not in lt and "securityGroupNames" not in lt
    assert "keyName" not in lt


def test_metadata_volume_profile_user_data(block_lt):
    lt = block_lt.inputs(LT, "c1-lt")
    assert lt["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpTokens": "required",
        "httpPutResponseHopLimit": 2,
        "instanceMetadataTags": "enabled",
    }
    assert lt["blockDeviceMappings"] == [
        {
            "deviceName": "/dev/sda1",
            "ebs": {
                "volumeType": "gp3",
                "volumeSize": 700,
                "iops": 3000,
                "throughput": 250,
                "encrypted": "true",
                "deleteOnTermination": "true",
            },
        }
    ]
    assert lt["iamInstanceProfile"] == {"arn": "arn:aws:iam::123456789012:instance-profile/p"}
    assert lt["userData"] == USER_DATA
    assert lt["tagSpecifications"] == [
        {"resourceType": t, "tags": TAGS} for t in ("instance", "volume", "network-interface")
    ]


def test_capacity_block_market_type(block_lt):
    """The template says capacity-block; each Auto Scaling group names its block."""
    lt = block_lt.inputs(LT, "c1-lt")
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert "capacityReservationSpecification" not in lt
    assert "placement" not in lt


def test_on_demand_uses_cluster_placement_group():
    run = _run(capacity_blocks=False, placement_group=True)
    assert run.custom() == [(LT, "c1-lt"), (PG, "c1-pg")]
    pg = run.inputs(PG, "c1-pg")
    assert pg["strategy"] == "cluster"
    assert pg["tags"] == {**TAGS, "Name": "c1-nodes"}
    lt = run.inputs(LT, "c1-lt")
    assert "instanceMarketOptions" not in lt and "capacityReservationSpecification" not in lt
    assert lt["placement"]["groupName"].startswith("c1-pg")


def test_block_with_placement_group_is_refused():
    with pytest.raises(Exception, match="no placement group"):
        _run(placement_group=True)


@pytest.mark.parametrize(
    "instance_type,total",
    [
        ("p4d.24xlarge", 5),
        ("p4de.24xlarge", 5),
        ("p5.48xlarge", 33),
        ("p5e.48xlarge", 33),
        ("p5en.48xlarge", 17),
        ("p6-b200.48xlarge", 9),
    ],
)
def test_every_catalog_type_declares_its_layout(instance_type, total):
    nis = _run(instance_type).inputs(LT, "c1-lt")["networkInterfaces"]
    assert len(nis) == total
    assert nis[0]["interfaceType"] == "interface" and (nis[0]["networkCardIndex"], nis[0]["deviceIndex"]) == (0, 0)
    assert [n["networkCardIndex"] for n in nis[1:]] == [0] + list(range(1, total - 1))
    assert all(n["interfaceType"] == "efa-only" for n in nis[1:])


def test_image_id_pinned_or_explicitly_unpinned():
    raw = valid_raw()
    raw["image"] = {"allow_unpinned": True}  # the program refuses an unpinned image without it
    assert image_id(parse_config(raw)) == (
        "resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
    )
    raw["image"] = {"ami_id": "ami-0123456789abcdef0"}
    assert image_id(parse_config(raw)) == "ami-0123456789abcdef0"
