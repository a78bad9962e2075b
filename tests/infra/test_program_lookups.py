"""Provider lookups that fail inside the program become `path: message` RunErrors.

Under a real `pulumi preview` a data source that fails (no such subnet, access denied)
reaches the program as an exception from the invoke: the engine answers the invoke
with a gRPC error, which the SDK raises where the program called the lookup. The mocks
raise exactly that (`PlanMocks(fail_invokes=...)`, an `EngineInvokeError`), so these
tests run the same path as `pulumi preview` (`__main__.py` -> `infra.stack.main`) and
the offline plan. Every message names the config path, what failed and the fix.
"""

from __future__ import annotations

import pulumi
import pytest

from offline.mocks import PlanMocks, declared_blocks, run_with_mocks
from offline.plan import warning_lines
from tests.support.mocks import REGION, run_program, valid_raw

R = "gpu-cluster:cluster"
SUBNET = "subnet-0a1b2c3d4e5f60718"
VPC = "vpc-0a1b2c3d4e5f60718"
AMI = "ami-0a1b2c3d4e5f60718"
CR_A = "cr-0123456789abcdef0"

GET_SUBNET = "aws:ec2/getSubnet:getSubnet"
GET_ROUTE_TABLE = "aws:ec2/getRouteTable:getRouteTable"
GET_VPC = "aws:ec2/getVpc:getVpc"
GET_ZONES = "aws:index/getAvailabilityZones:getAvailabilityZones"
GET_BLOCK = "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation"
GET_AMI = "aws:ec2/getAmi:getAmi"

# What the AWS provider says (bridged Terraform data sources, AWS SDK for Go errors).
DENIED = (
    "operation error EC2: {op}, https response error StatusCode: 403, RequestID: "
    "0f0e0d0c-0b0a-0908-0706-050403020100, api error UnauthorizedOperation: You are not authorized "
    "to perform this operation."
)
NO_SUBNET = "no matching EC2 Subnet found"
NO_AMI = "Your query returned no results. Please change your search criteria and try again."
NO_BLOCK = f"reading EC2 Capacity Block Reservation ({CR_A}): couldn't find resource"
THROTTLED = (
    "operation error EC2: DescribeAvailabilityZones, exceeded maximum number of attempts, 25, "
    "api error RequestLimitExceeded: Request limit exceeded."
)


def _mocks(raw, fail) -> PlanMocks:
    return PlanMocks(REGION, subnet_az="us-east-2b", blocks=declared_blocks(raw), fail_invokes=fail)


def refused(fail, raw=None) -> list[str]:
    """The RunError lines of the program under mocks whose invokes in `fail` fail."""
    raw = raw or valid_raw()
    mocks = _mocks(raw, fail)
    with pytest.raises(pulumi.RunError) as exc:
        run_program(raw, mocks=mocks)
    assert not any(r["custom"] for r in mocks.resources), "nothing may be declared after a failed lookup"
    return str(exc.value).splitlines()


def test_subnet_that_does_not_exist():
    """The dev stack's placeholder subnet under a real preview."""
    assert refused({GET_SUBNET: NO_SUBNET}) == [
        f"{R}.network.subnet_id: {SUBNET} does not exist in this account in us-east-2; "
        "check the id, or omit subnet_id to create a VPC"
    ]


def test_subnet_access_denied_names_the_permission():
    assert refused({GET_SUBNET: DENIED.format(op="DescribeSubnets")}) == [
        f"{R}.network.subnet_id: could not read subnet {SUBNET} in us-east-2: access denied "
        f"({DENIED.format(op='DescribeSubnets')}); the identity that runs pulumi needs ec2:DescribeSubnets: "
        "grant it, or run with credentials that have it"
    ]


def test_route_table_without_association_falls_back_to_the_main_table():
    """No explicit association is "not found", not an error: the VPC's main table applies."""
    raw = valid_raw()

    def only_the_association(args):
        return "no matching EC2 Route Table found" if args.get("subnetId") else None

    mocks = _mocks(raw, {GET_ROUTE_TABLE: only_the_association})
    run = run_program(raw, mocks=mocks)
    tables = [c["args"] for c in run.calls if c["token"] == GET_ROUTE_TABLE]
    assert tables[0] == {"subnetId": SUBNET}
    assert tables[1]["vpcId"] == VPC and tables[1]["filters"] == [{"name": "association.main", "values": ["true"]}]


def test_route_table_access_denied():
    why = DENIED.format(op="DescribeRouteTables")
    assert refused({GET_ROUTE_TABLE: why}) == [
        f"{R}.network.subnet_id: could not read the route table of {SUBNET} in us-east-2: access denied "
        f"({why}); the identity that runs pulumi needs ec2:DescribeRouteTables: grant it, or run with "
        "credentials that have it"
    ]


def test_vpc_access_denied():
    why = DENIED.format(op="DescribeVpcAttribute")
    assert refused({GET_VPC: why}) == [
        f"{R}.network.subnet_id: could not read {VPC} (the VPC of {SUBNET}) in us-east-2: access denied "
        f"({why}); the identity that runs pulumi needs ec2:DescribeVpcs and ec2:DescribeVpcAttribute: "
        "grant it, or run with credentials that have it"
    ]


def test_capacity_block_not_found_uses_the_ops_preflight_words():
    assert refused({GET_BLOCK: NO_BLOCK}) == [
        f"{R}.capacity.capacity_blocks[0].reservation_id: {CR_A} does not exist in this account in us-east-2; "
        "check the id and aws:region, or run `python3 -m ops find-blocks` to find and buy one"
    ]


def test_capacity_block_access_denied():
    why = DENIED.format(op="DescribeCapacityReservations")
    assert refused({GET_BLOCK: why}) == [
        f"{R}.capacity.capacity_blocks[0].reservation_id: could not read Capacity Block {CR_A} in us-east-2: "
        f"access denied ({why}); the identity that runs pulumi needs ec2:DescribeCapacityReservations: "
        "grant it, or run with credentials that have it"
    ]


def test_ami_not_found():
    assert refused({GET_AMI: NO_AMI}) == [
        f"{R}.image.ami_id: {AMI} does not exist in us-east-2 or is not shared with this account; AMI ids "
        "are per region: pin the id the DLAMI parameter gives in us-east-2 "
        "(`python3 -m ops pin --stack <stack> --image`)"
    ]


def test_ami_lookup_error():
    why = DENIED.format(op="DescribeImages")
    assert refused({GET_AMI: why}) == [
        f"{R}.image.ami_id: could not read image {AMI} in us-east-2: access denied ({why}); the identity "
        "that runs pulumi needs ec2:DescribeImages: grant it, or run with credentials that have it"
    ]


def test_zones_throttled_is_a_retry_not_a_permission():
    assert refused({GET_ZONES: THROTTLED}) == [
        f"{R}.network.availability_zone: could not read the availability zones in us-east-2: {THROTTLED}; "
        "check aws:region (a region name such as us-east-2) and your AWS credentials"
    ]


def test_every_failed_lookup_at_once():
    lines = refused(
        {
            GET_ZONES: DENIED.format(op="DescribeAvailabilityZones"),
            GET_BLOCK: NO_BLOCK,
            GET_SUBNET: NO_SUBNET,
            GET_AMI: NO_AMI,
        }
    )
    assert [line.split(": ")[0] for line in lines] == [
        f"{R}.image.ami_id",
        f"{R}.network.availability_zone",
        f"{R}.capacity.capacity_blocks[0].reservation_id",
        f"{R}.network.subnet_id",
    ]


def test_under_the_pulumi_entry_point():
    """`pulumi preview` runs `__main__.py` -> infra.stack.main(): the same RunError line,
    and no other exception is left for the SDK to report as unhandled."""
    import json

    # main() is `pulumi up`, which refuses the shipped example ids (model/placeholders.py)
    # before any lookup: a real-looking subnet id reaches the lookup that fails.
    real_subnet = "subnet-07e3c41b9d2a58f60"
    raw = json.loads(
        json.dumps(valid_raw())
        .replace(SUBNET, real_subnet)
        .replace(AMI, "ami-04c7e1b95a3d2f806")
        .replace(CR_A, "cr-05d1e9a3c7b24f681")
    )

    def program():
        from infra.stack import main
        from offline.mocks import PLAN_NOW

        main(now=PLAN_NOW)

    with pytest.raises(pulumi.RunError) as exc:
        run_with_mocks(
            program,
            _mocks(raw, {GET_SUBNET: NO_SUBNET}),
            config={R: json.dumps(raw), "aws:region": REGION},
        )
    assert str(exc.value) == (
        f"{R}.network.subnet_id: {real_subnet} does not exist in this account in us-east-2; "
        "check the id, or omit subnet_id to create a VPC"
    )
    assert exc.value.__cause__ is None


def test_preflight_warnings_reach_the_log():
    """A warning (egress through a transit gateway) is logged, not fatal: `pulumi preview`
    prints it, and the plan CLI prints the same line."""
    raw = valid_raw()
    mocks = PlanMocks(
        REGION, subnet_az="us-east-2b", blocks=declared_blocks(raw), default_route="tgw-0123456789abcdef0"
    )
    run_program(raw, mocks=mocks)
    # (the fixture's cluster name differs from the stack's: that is a config warning of its own)
    (line,) = [w for w in warning_lines(mocks) if w.startswith(f"warning: {R}.network.subnet_id: ")]
    assert "tgw-0123456789abcdef0" in line
