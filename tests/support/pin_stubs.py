"""Stubbed image and FSx answers for `ops pin`."""

from __future__ import annotations

from datetime import UTC, datetime

from model.image import DLAMI_SSM_PARAMETER
from tests.support.ops_stubs import Aws

NEW_AMI = "ami-0fedcba9876543210"
DLAMI_NAME = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) 20261127"
SUBNET = "subnet-0a1b2c3d4e5f60718"
FS = "fs-0123456789abcdef0"


def stub_image(aws: Aws, ami: str = NEW_AMI, name: str = DLAMI_NAME, arch: str = "x86_64") -> None:
    aws.stub("ssm").add_response(
        "get_parameter",
        {"Parameter": {"Name": DLAMI_SSM_PARAMETER, "Type": "String", "Value": ami, "Version": 42}},
        {"Name": DLAMI_SSM_PARAMETER},
    )
    aws.stub("ec2").add_response(
        "describe_images",
        {"Images": [{"ImageId": ami, "Name": name, "Architecture": arch, "CreationDate": "2026-11-27T09:41:12.000Z"}]},
        {"ImageIds": [ami], "IncludeDeprecated": True},
    )


def file_system(
    fs_id: str = FS,
    cluster: str = "dev",
    lifecycle: str = "AVAILABLE",
    deployment: str = "PERSISTENT_2",
    capacity: int = 1200,
    subnet: str = SUBNET,
    name: str | None = None,
    **lustre,
) -> dict:
    return {
        "FileSystemId": fs_id,
        "FileSystemType": "LUSTRE",
        "Lifecycle": lifecycle,
        "StorageCapacity": capacity,
        "StorageType": "SSD",
        "SubnetIds": [subnet],
        "FileSystemTypeVersion": "2.15",
        "CreationTime": datetime(2026, 11, 20, 10, 0, tzinfo=UTC),
        "Tags": [
            {"Key": "GpuClusterName", "Value": cluster},
            {"Key": "Name", "Value": name or f"{cluster}-fsx"},
            {"Key": "team", "Value": "ml-infra"},
        ],
        "LustreConfiguration": {
            "DeploymentType": deployment,
            "CopyTagsToBackups": True,
            "PerUnitStorageThroughput": 250,
            **lustre,
        },
    }


def stub_fsx(aws: Aws, *pages: list[dict]) -> None:
    fsx = aws.stub("fsx")
    for n, page in enumerate(pages):
        reply: dict = {"FileSystems": page}
        if n < len(pages) - 1:
            reply["NextToken"] = f"page-{n + 1}"
        fsx.add_response("describe_file_systems", reply, {"NextToken": f"page-{n}"} if n else {})
