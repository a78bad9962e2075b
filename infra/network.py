"""Network: the one subnet every node and the file system live in.

EFA OS-bypass traffic is not routable, so all EFA peers must share one subnet and AZ
[EFA-START]. Either an existing subnet is used (its AZ is checked against the config
before any resource is declared, `check_existing_subnet`), or a minimal VPC is created:
a private subnet for the nodes and FSx, a public subnet holding only the NAT gateway
that gives the nodes egress for SSM and package/image pulls, and an S3 gateway endpoint. Nodes cannot sit
in a public subnet: instances with several network interfaces cannot get an
auto-assigned public IP ([BOTO-EC2] AssociatePublicIpAddress).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.component import Component
from model.paths import ROOT


def check_existing_subnet(subnet_id: str, availability_zone: str) -> list[tuple[str, str]]:
    """Look the subnet up (a data-source read, no resource) and compare its AZ.

    Runs before any resource is declared, in preview and in up alike, so a wrong
    subnet fails the same way as a config error: one `path: message` line.
    """
    found = aws.ec2.get_subnet(id=subnet_id)
    if found.availability_zone != availability_zone:
        return [
            (
                f"{ROOT}.network.subnet_id",
                f"subnet {subnet_id} is in {found.availability_zone} but network.availability_zone "
                f"is {availability_zone}; EFA peers and the Capacity Blocks must share one AZ, so "
                f"use a subnet in {availability_zone} or change the AZ (and the blocks) to {found.availability_zone}",
            )
        ]
    return []


def split_vpc_cidr(vpc_cidr: str) -> tuple[str, str]:
    """(private, public) subnet CIDRs: the first and second quarter of the VPC.

    The private subnet gets a quarter of the VPC (a /18 of a /16): each node needs only
    one address (efa-only interfaces take none) plus FSx's few ENIs; the rest of the
    VPC stays free for the user's own subnets.
    """
    net = ipaddress.ip_network(vpc_cidr, strict=False)
    quarters = list(net.subnets(prefixlen_diff=2))
    return str(quarters[0]), str(quarters[1])


@dataclass
class NetworkArgs:
    cluster_name: str
    availability_zone: str
    subnet_id: str | None = None
    vpc_cidr: str = "10.0.0.0/16"
    region: str = "us-east-1"  # for the S3 gateway endpoint's service name
    tags: dict[str, str] = field(default_factory=dict)
    # accounting enabled: a second private subnet in this other zone, only for the RDS
    # subnet group, which must cover two AZs (infra/accounting.py).
    database_zone: str | None = None


def database_subnet_cidr(vpc_cidr: str) -> str:
    """The database subnet: the VPC's third quarter (the nodes' and NAT's are the first two)."""
    net = ipaddress.ip_network(vpc_cidr, strict=False)
    return str(list(net.subnets(prefixlen_diff=2))[2])


def other_zone(zones: tuple[str, ...], zone: str) -> str:
    """The first available zone (by name) that is not `zone`: the database subnet's."""
    others = sorted(z for z in zones if z != zone)
    if not others:
        raise ValueError(f"no availability zone besides {zone}: RDS needs a subnet group covering two AZs")
    return others[0]


class Network(Component):
    """Existing subnet, or VPC + private subnet + NAT egress. Outputs vpc_id, subnet_id."""

    TYPE = "gpu-cluster:index:Network"
    vpc_id: pulumi.Output[str]
    subnet_id: pulumi.Output[str]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, opts)
        if args.subnet_id:
            existing = aws.ec2.get_subnet_output(id=args.subnet_id, opts=pulumi.InvokeOutputOptions(parent=self))
            self.vpc_id = existing.vpc_id
            self.subnet_id = pulumi.Output.from_input(args.subnet_id)
            self.database_subnet_id: pulumi.Output[str] | None = None
            self.created = False
        else:
            self._create_vpc(name, args)
            self.created = True
        self.register_outputs({"vpc_id": self.vpc_id, "subnet_id": self.subnet_id})

    def _create_vpc(self, name: str, args: NetworkArgs) -> None:
        private_cidr, public_cidr = split_vpc_cidr(args.vpc_cidr)
        # DNS support and hostnames: FSx is mounted by DNS name and SSM needs both.
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_support=True,
            enable_dns_hostnames=True,
            tags=_name_tags(args, "vpc"),
            opts=self.child,
        )
        private = self._subnet(name, args, vpc, "private", private_cidr)
        public = self._subnet(name, args, vpc, "public", public_cidr)
        igw, nat = self._nat_egress(name, args, vpc, public)
        self._public_routes(name, args, vpc, public, igw)
        private_rt = self._private_routes(name, args, vpc, private, nat)
        # S3 through a gateway endpoint (free) instead of the NAT gateway (billed per GB):
        # the user-data payload, datasets and checkpoints the nodes read from S3.
        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[private_rt.id],
            tags=_name_tags(args, "s3"),
            opts=self.child,
        )
        self.vpc_id = vpc.id
        self.subnet_id = private.id
        self.database_subnet_id = None
        if args.database_zone is not None:
            # No route table of ours: the VPC's main one (local routes only) is all a
            # database subnet needs.
            database = aws.ec2.Subnet(
                f"{name}-database",
                vpc_id=vpc.id,
                cidr_block=database_subnet_cidr(args.vpc_cidr),
                availability_zone=args.database_zone,
                map_public_ip_on_launch=False,
                tags=_name_tags(args, "database"),
                opts=self.child,
            )
            self.database_subnet_id = database.id

    def _subnet(self, name: str, args: NetworkArgs, vpc: aws.ec2.Vpc, kind: str, cidr: str) -> aws.ec2.Subnet:
        return aws.ec2.Subnet(
            f"{name}-{kind}",
            vpc_id=vpc.id,
            cidr_block=cidr,
            availability_zone=args.availability_zone,
            map_public_ip_on_launch=False,
            tags=_name_tags(args, kind),
            opts=self.child,
        )

    def _nat_egress(
        self, name: str, args: NetworkArgs, vpc: aws.ec2.Vpc, public: aws.ec2.Subnet
    ) -> tuple[aws.ec2.InternetGateway, aws.ec2.NatGateway]:
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=_name_tags(args, "igw"), opts=self.child)
        eip = aws.ec2.Eip(f"{name}-nat-eip", domain="vpc", tags=_name_tags(args, "nat"), opts=self.child)
        nat = aws.ec2.NatGateway(
            f"{name}-nat",
            allocation_id=eip.id,
            subnet_id=public.id,
            tags=_name_tags(args, "nat"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
        )
        return igw, nat

    def _public_routes(
        self, name: str, args: NetworkArgs, vpc: aws.ec2.Vpc, public: aws.ec2.Subnet, igw: aws.ec2.InternetGateway
    ) -> None:
        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt", vpc_id=vpc.id, tags=_name_tags(args, "public"), opts=self.child
        )
        aws.ec2.Route(
            f"{name}-public-default",
            route_table_id=public_rt.id,
            destination_cidr_block="0.0.0.0/0",
            gateway_id=igw.id,
            opts=self.child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-public-assoc", route_table_id=public_rt.id, subnet_id=public.id, opts=self.child
        )

    def _private_routes(
        self, name: str, args: NetworkArgs, vpc: aws.ec2.Vpc, private: aws.ec2.Subnet, nat: aws.ec2.NatGateway
    ) -> aws.ec2.RouteTable:
        private_rt = aws.ec2.RouteTable(
            f"{name}-private-rt", vpc_id=vpc.id, tags=_name_tags(args, "private"), opts=self.child
        )
        aws.ec2.Route(
            f"{name}-private-default",
            route_table_id=private_rt.id,
            destination_cidr_block="0.0.0.0/0",
            nat_gateway_id=nat.id,
            opts=self.child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-private-assoc", route_table_id=private_rt.id, subnet_id=private.id, opts=self.child
        )
        return private_rt


def _name_tags(args: NetworkArgs, suffix: str) -> dict[str, str]:
    return {**args.tags, "Name": f"{args.cluster_name}-{suffix}"}
