"""Network component under mocks: existing subnet, or a minimal VPC with NAT egress."""

from __future__ import annotations

import pulumi
import pytest

from infra.network import Network, NetworkArgs, check_existing_subnet, split_vpc_cidr
from tests.support.mocks import run_component

TAGS = {"GpuClusterName": "c1", "team": "ml"}


@pytest.fixture(scope="module")
def created():
    def program():
        net = Network(
            "c1",
            NetworkArgs(
                cluster_name="c1",
                availability_zone="us-east-2b",
                vpc_cidr="10.40.0.0/16",
                region="us-east-2",
                tags=TAGS,
            ),
        )
        return pulumi.Output.all(net.vpc_id, net.subnet_id)

    return run_component(program)


@pytest.fixture(scope="module")
def existing():
    def program():
        net = Network(
            "c1",
            NetworkArgs(
                cluster_name="c1", availability_zone="us-east-2b", subnet_id="subnet-0a1b2c3d4e5f60718", tags=TAGS
            ),
        )
        return pulumi.Output.all(net.vpc_id, net.subnet_id)

    return run_component(program, subnet_az="us-east-2b")


def test_created_vpc_children(created):
    assert created.custom() == [
        ("aws:ec2/eip:Eip", "c1-nat-eip"),
        ("aws:ec2/internetGateway:InternetGateway", "c1-igw"),
        ("aws:ec2/natGateway:NatGateway", "c1-nat"),
        ("aws:ec2/route:Route", "c1-private-default"),
        ("aws:ec2/route:Route", "c1-public-default"),
        ("aws:ec2/routeTable:RouteTable", "c1-private-rt"),
        ("aws:ec2/routeTable:RouteTable", "c1-public-rt"),
        ("aws:ec2/routeTableAssociation:RouteTableAssociation", "c1-private-assoc"),
        ("aws:ec2/routeTableAssociation:RouteTableAssociation", "c1-public-assoc"),
        ("aws:ec2/subnet:Subnet", "c1-private"),
        ("aws:ec2/subnet:Subnet", "c1-public"),
        ("aws:ec2/vpc:Vpc", "c1-vpc"),
        ("aws:ec2/vpcEndpoint:VpcEndpoint", "c1-s3"),
    ]
    for typ, name in created.custom():
        assert created.parent_type(typ, name) == "gpu-cluster:index:Network"


def test_created_vpc_inputs(created):
    vpc = created.inputs("aws:ec2/vpc:Vpc", "c1-vpc")
    assert vpc["cidrBlock"] == "10.40.0.0/16"
    assert vpc["enableDnsHostnames"] is True and vpc["enableDnsSupport"] is True
    private = created.inputs("aws:ec2/subnet:Subnet", "c1-private")
    public = created.inputs("aws:ec2/subnet:Subnet", "c1-public")
    assert private["cidrBlock"] == "10.40.0.0/18" and public["cidrBlock"] == "10.40.64.0/18"
    assert private["availabilityZone"] == public["availabilityZone"] == "us-east-2b"
    assert private["mapPublicIpOnLaunch"] is False
    assert private["tags"] == {**TAGS, "Name": "c1-private"}
    nat = created.inputs("aws:ec2/natGateway:NatGateway", "c1-nat")
    assert nat["subnetId"].startswith("subnet-") and nat["allocationId"].startswith("eipalloc-")
    priv_route = created.inputs("aws:ec2/route:Route", "c1-private-default")
    pub_route = created.inputs("aws:ec2/route:Route", "c1-public-default")
    assert priv_route["destinationCidrBlock"] == pub_route["destinationCidrBlock"] == "0.0.0.0/0"
    assert priv_route["natGatewayId"].startswith("nat-") and "gatewayId" not in priv_route
    assert pub_route["gatewayId"].startswith("igw-")
    s3 = created.inputs("aws:ec2/vpcEndpoint:VpcEndpoint", "c1-s3")
    assert s3["serviceName"] == "com.amazonaws.us-east-2.s3" and s3["vpcEndpointType"] == "Gateway"
    assert s3["routeTableIds"] == [created.inputs("aws:ec2/route:Route", "c1-private-default")["routeTableId"]]


def test_created_vpc_outputs_private_subnet(created):
    vpc_id, subnet_id = created.value
    assert vpc_id.startswith("vpc-")
    private = [r for r in created.of_type("aws:ec2/subnet:Subnet") if r["name"] == "c1-private"]
    assert private and subnet_id.startswith("subnet-")
    assert (
        created.inputs("aws:ec2/routeTableAssociation:RouteTableAssociation", "c1-private-assoc")["subnetId"]
        == subnet_id
    )


def test_existing_subnet_declares_nothing(existing):
    assert existing.custom() == []
    assert existing.value == ["vpc-0a1b2c3d4e5f60718", "subnet-0a1b2c3d4e5f60718"]
    assert {"token": "aws:ec2/getSubnet:getSubnet", "args": {"id": "subnet-0a1b2c3d4e5f60718"}} in existing.calls


def test_subnet_in_other_az_is_reported():
    def program():
        return {"problems": check_existing_subnet("subnet-0a1b2c3d4e5f60718", "us-east-2b")}

    run = run_component(program, subnet_az="us-east-2a")
    [(path, message)] = run.value["problems"]
    assert path == "gpu-cluster:cluster.network.subnet_id"
    assert "is in us-east-2a but network.availability_zone is us-east-2b" in message


def test_subnet_in_same_az_passes():
    run = run_component(
        lambda: {"problems": check_existing_subnet("subnet-0a1b2c3d4e5f60718", "us-east-2b")}, subnet_az="us-east-2b"
    )
    assert run.value["problems"] == []


@pytest.mark.parametrize(
    "cidr,private,public",
    [
        ("10.0.0.0/16", "10.0.0.0/18", "10.0.64.0/18"),
        ("172.16.8.0/24", "172.16.8.0/26", "172.16.8.64/26"),
    ],
)
def test_split_vpc_cidr(cidr, private, public):
    assert split_vpc_cidr(cidr) == (private, public)
