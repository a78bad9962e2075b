"""The cluster's live FSx file system and the identity it was created with.

The `fsx_identity` stack output is computed from the config, so after a config edit it
shows what the file system *would* be created with now; the live file system says
what it *was* created with, which is what `fsx.pinned` must hold. The fields come from
`model.fsx.FsxIdentity` itself (`LIVE_FIELDS` must cover exactly its fields, checked
at import), so a field added to the model cannot be left out here silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from model.config import ClusterConfig
from model.fsx import FsxIdentity
from model.tags import CLUSTER as CLUSTER_TAG
from ops.aws import OpsError, call

# The file system's Name tag (infra/storage.py) and the cluster tag every resource gets
# (infra/cluster.py); FSx has no server-side tag filter, so both are matched here.
NAME_TAG = "Name"
# A file system being deleted is not the cluster's any more.
GONE = {"DELETING"}


def fsx_name(cluster: str) -> str:
    return f"{cluster}-fsx"


def _tags(fs: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in fs.get("Tags", [])}


def _lustre(fs: dict[str, Any]) -> dict[str, Any]:
    lustre: dict[str, Any] = fs.get("LustreConfiguration", {})
    return lustre


def _s3_import_path(fs: dict[str, Any]) -> str | None:
    # Set on the file system only for the legacy S3 link (PERSISTENT_1, SCRATCH_2);
    # PERSISTENT_2 links through data repository associations (not part of the identity).
    return _lustre(fs).get("DataRepositoryConfiguration", {}).get("ImportPath") or None


# FsxIdentity field -> how to read it from a DescribeFileSystems record. `subnet` is
# resolved separately (it may need two more calls).
LIVE_FIELDS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "cluster_name": lambda fs: _tags(fs).get(CLUSTER_TAG, ""),
    "deployment_type": lambda fs: _lustre(fs).get("DeploymentType", ""),
    "storage_type": lambda fs: fs.get("StorageType", ""),
    "file_system_type_version": lambda fs: fs.get("FileSystemTypeVersion", ""),
    "subnet": lambda fs: fs["SubnetIds"][0],
    "storage_capacity_gib": lambda fs: fs["StorageCapacity"],
    # Absent on SCRATCH types, which have no backups, and false on a file system created
    # linked to S3 (PERSISTENT_1 import path): false, as fsx_identity() gives.
    "copy_tags_to_backups": lambda fs: bool(_lustre(fs).get("CopyTagsToBackups", False)),
    "s3_import_path": _s3_import_path,
}
if set(LIVE_FIELDS) != set(FsxIdentity.model_fields):  # pragma: no cover - a model change must be mirrored
    raise ImportError(
        f"ops/fsx.py LIVE_FIELDS {sorted(LIVE_FIELDS)} != FsxIdentity fields {sorted(FsxIdentity.model_fields)}"
    )


def find_file_system(fsx: Any, cluster: str, region: str, file_system_id: str | None = None) -> dict[str, Any]:
    """The one Lustre file system tagged for this cluster (or the given id, checked)."""
    action = "finding the cluster's FSx file system"
    tags = f"{CLUSTER_TAG}={cluster} and {NAME_TAG}={fsx_name(cluster)}"
    found: list[dict[str, Any]] = []
    token = None
    while True:
        params: dict[str, Any] = {"FileSystemIds": [file_system_id]} if file_system_id else {}
        if token:
            params["NextToken"] = token
        page = call(fsx, "describe_file_systems", action, **params)
        found += [
            fs
            for fs in page["FileSystems"]
            if fs.get("FileSystemType") == "LUSTRE"
            and fs.get("Lifecycle") not in GONE
            and _tags(fs).get(CLUSTER_TAG) == cluster
            and _tags(fs).get(NAME_TAG) == fsx_name(cluster)
        ]
        token = page.get("NextToken")
        if not token:
            break
    if file_system_id and not found:
        raise OpsError(
            f"{file_system_id} is not an FSx for Lustre file system tagged {tags}; give the id of this "
            "cluster's file system"
        )
    if not found:
        raise OpsError(
            f"no FSx for Lustre file system tagged {tags} in {region}; the first `pulumi up` creates it "
            "(or check aws:region)"
        )
    if len(found) > 1:
        listed = ", ".join(
            f"{fs['FileSystemId']} {fs.get('Lifecycle', '?')} created "
            f"{fs['CreationTime'].strftime('%Y-%m-%dT%H:%M:%SZ')}"
            for fs in found
        )
        raise OpsError(
            f"{len(found)} FSx file systems are tagged {tags} in {region} ({listed}); pass "
            "--file-system-id with the one whose DNS name `pulumi stack output fsx_dns_name` shows"
        )
    return found[0]


def created_subnet(ec2: Any, subnet_id: str) -> str:
    """'created:<az>:<vpc cidr>', the identity model/fsx_identity.py gives a subnet the
    stack creates (its id changes with every re-creation; its AZ and VPC CIDR are what
    the config says)."""
    subnet = call(ec2, "describe_subnets", f"reading subnet {subnet_id} of the file system", SubnetIds=[subnet_id])[
        "Subnets"
    ][0]
    vpc = call(ec2, "describe_vpcs", f"reading VPC {subnet['VpcId']} of the file system", VpcIds=[subnet["VpcId"]])[
        "Vpcs"
    ][0]
    return f"created:{subnet['AvailabilityZone']}:{vpc['CidrBlock']}"


def live_identity(fs: dict[str, Any], cfg: ClusterConfig, ec2: Any) -> FsxIdentity:
    values = {field: read(fs) for field, read in LIVE_FIELDS.items()}
    if cfg.network.subnet_id is None:
        values["subnet"] = created_subnet(ec2, values["subnet"])
    return FsxIdentity(**values)
