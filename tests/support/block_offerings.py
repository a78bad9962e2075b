"""Stubbed Capacity Block offerings for `ops find-blocks`."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.support.ops_stubs import Aws

OFF1, OFF2 = "cb-0123456789abcdef0", "cb-0fedcba9876543210"
EXPECTED = {
    "InstanceType": "p5.48xlarge",
    "InstanceCount": 4,
    "CapacityDurationHours": 168,
    "StartDateRange": datetime(2026, 12, 5, tzinfo=UTC),
}
START = datetime(2026, 12, 8, 11, 30, tzinfo=UTC)
END = datetime(2026, 12, 15, 11, 30, tzinfo=UTC)
ARGS = [
    "find-blocks",
    "--instance-type",
    "p5.48xlarge",
    "--count",
    "4",
    "--days",
    "7",
    "--earliest",
    "2026-12-05",
    "--region",
    "us-east-2",
]


def offering(oid: str, start: datetime, end: datetime, az: str, fee: str) -> dict:
    return {
        "CapacityBlockOfferingId": oid,
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": az,
        "InstanceCount": 4,
        "StartDate": start,
        "EndDate": end,
        "CapacityBlockDurationHours": 168,
        "UpfrontFee": fee,
        "CurrencyCode": "USD",
        "Tenancy": "default",
    }


def stub_offerings(aws: Aws) -> None:
    later = datetime(2026, 12, 9, 11, 30, tzinfo=UTC), datetime(2026, 12, 16, 11, 30, tzinfo=UTC)
    aws.stub("ec2").add_response(
        "describe_capacity_block_offerings",
        {
            "CapacityBlockOfferings": [
                offering(OFF2, *later, "us-east-2a", "41000.00"),
                offering(OFF1, START, END, "us-east-2b", "42336.00"),
            ]
        },
        EXPECTED,
    )
