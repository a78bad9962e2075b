"""FSx for Lustre component: deployment types, compression, S3 linking."""

from __future__ import annotations

import pulumi
import pytest

from model.config import FsxConfig
from infra.storage import FileSystem, FileSystemArgs
from tests.mocks import run_component

FS = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
TAGS = {"GpuClusterName": "c1"}


def _run(fsx: FsxConfig):
    def program():
        fs = FileSystem("c1", FileSystemArgs(cluster_name="c1", fsx=fsx, subnet_id="subnet-0abc",
                                             security_group_id="sg-0abc", tags=TAGS))
        return pulumi.Output.all(fs.file_system_id, fs.dns_name, fs.mount_name)
    return run_component(program)


@pytest.fixture(scope="module")
def persistent2():
    return _run(FsxConfig(deployment_type="PERSISTENT_2", storage_capacity_gib=2400, per_unit_storage_throughput=500,
                          data_repository={"s3_uri": "s3://bucket-1/datasets", "file_system_path": "/data"}))


def test_persistent2_in_cluster_subnet_with_the_node_group(persistent2):
    assert persistent2.custom() == [(DRA, "c1-s3"), (FS, "c1-lustre")]
    fs = persistent2.inputs(FS, "c1-lustre")
    assert fs["deploymentType"] == "PERSISTENT_2"
    assert fs["subnetIds"] == "subnet-0abc"
    assert fs["securityGroupIds"] == ["sg-0abc"]
    assert fs["storageCapacity"] == 2400 and fs["perUnitStorageThroughput"] == 500
    assert fs["dataCompressionType"] == "LZ4"
    assert fs["fileSystemTypeVersion"] == "2.15"
    assert fs["storageType"] == "SSD"
    assert "efaEnabled" not in fs and "metadataConfiguration" not in fs
    assert "importPath" not in fs and "exportPath" not in fs
    assert fs["tags"] == {**TAGS, "Name": "c1-fsx"}
    for typ, name in persistent2.custom():
        assert persistent2.parent_type(typ, name) == "gpu-cluster:index:FileSystem"


def test_persistent2_links_s3_through_an_association(persistent2):
    dra = persistent2.inputs(DRA, "c1-s3")
    assert dra["fileSystemId"] == "fs-0123456789abcdef0"
    assert dra["dataRepositoryPath"] == "s3://bucket-1/datasets"
    assert dra["fileSystemPath"] == "/data"
    assert dra["batchImportMetaDataOnCreate"] is True
    assert dra["s3"]["autoImportPolicy"]["events"] == ["NEW", "CHANGED", "DELETED"]
    assert dra["s3"]["autoExportPolicy"]["events"] == ["NEW", "CHANGED", "DELETED"]


def test_outputs_endpoint(persistent2):
    assert persistent2.value == ["fs-0123456789abcdef0", "fs-0123456789abcdef0.fsx.us-east-2.amazonaws.com", "abcdefgh"]


def test_persistent1_uses_import_path():
    run = _run(FsxConfig(deployment_type="PERSISTENT_1", storage_capacity_gib=1200, per_unit_storage_throughput=200,
                         data_repository={"s3_uri": "s3://bucket-1/x"}))
    assert run.custom() == [(FS, "c1-lustre")]
    fs = run.inputs(FS, "c1-lustre")
    assert fs["importPath"] == fs["exportPath"] == "s3://bucket-1/x"
    assert fs["autoImportPolicy"] == "NEW_CHANGED_DELETED"


def test_scratch2_has_no_throughput():
    run = _run(FsxConfig(deployment_type="SCRATCH_2", storage_capacity_gib=1200, per_unit_storage_throughput=None))
    fs = run.inputs(FS, "c1-lustre")
    assert fs["deploymentType"] == "SCRATCH_2"
    assert "perUnitStorageThroughput" not in fs
