"""FSx for Lustre component: deployment types, compression, S3 linking."""

from __future__ import annotations

import pulumi
import pytest

from infra.storage import FileSystem, FileSystemArgs
from model.fsx import FsxConfig
from tests.support.mocks import run_component

FS = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
TAGS = {"GpuClusterName": "c1"}


def _run(fsx: FsxConfig):
    def program():
        fs = FileSystem(
            "c1",
            FileSystemArgs(cluster_name="c1", fsx=fsx, subnet_id="subnet-0abc", security_group_id="sg-0abc", tags=TAGS),
        )
        return pulumi.Output.all(fs.file_system_id, fs.dns_name, fs.mount_name)

    return run_component(program)


@pytest.fixture(scope="module")
def persistent2():
    return _run(
        FsxConfig(
            deployment_type="PERSISTENT_2",
            storage_capacity_gib=2400,
            per_unit_storage_throughput=500,
            data_repository={"s3_uri": "s3://bucket-1/datasets", "file_system_path": "/data"},
            backup_retention_days=0,
            allow_no_backups=True,
        )
    )


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
    assert fs["tags"] == {**TAGS, "Name": "c1-fsx", "GpuClusterDataRepository": "s3://bucket-1"}
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
    run = _run(
        FsxConfig(
            deployment_type="PERSISTENT_1",
            storage_capacity_gib=1200,
            per_unit_storage_throughput=200,
            data_repository={"s3_uri": "s3://bucket-1/x"},
        )
    )
    assert run.custom() == [(FS, "c1-lustre")]
    fs = run.inputs(FS, "c1-lustre")
    assert fs["importPath"] == fs["exportPath"] == "s3://bucket-1/x"
    assert fs["autoImportPolicy"] == "NEW_CHANGED_DELETED"


def test_scratch2_has_no_throughput():
    run = _run(FsxConfig(deployment_type="SCRATCH_2", storage_capacity_gib=1200, per_unit_storage_throughput=None))
    fs = run.inputs(FS, "c1-lustre")
    assert fs["deploymentType"] == "SCRATCH_2"
    assert "perUnitStorageThroughput" not in fs


def _lustre_resource(fsx: FsxConfig):
    """(inputs, protect) of the file system the component declares."""
    captured = {}

    def program():
        fs = FileSystem(
            "c1",
            FileSystemArgs(cluster_name="c1", fsx=fsx, subnet_id="subnet-0abc", security_group_id="sg-0abc", tags=TAGS),
        )
        captured["protect"] = [c for c in _children(fs)][0]._protect
        return fs.file_system_id

    run = run_component(program)
    return run.inputs(FS, "c1-lustre"), captured["protect"]


def _children(component):
    import pulumi_aws as aws

    return [r for r in component._childResources if isinstance(r, aws.fsx.LustreFileSystem)]


def test_persistent_is_protected_and_backed_up():
    fs, protect = _lustre_resource(FsxConfig(deployment_type="PERSISTENT_2"))
    assert fs["automaticBackupRetentionDays"] == 7
    assert fs["dailyAutomaticBackupStartTime"] == "03:00"
    assert fs["skipFinalBackup"] is False  # the provider's default (true) deletes with no backup
    assert fs["copyTagsToBackups"] is True
    assert fs["tags"] == {**TAGS, "Name": "c1-fsx"}  # not linked: no data repository tag
    assert protect is True


# A linked file system takes no FSx backups [FSX-CREATEBACKUP]. The config refuses a
# retention for it; the component asks for none even if one slipped through (7, the
# default), since FSx would fail the create or the delete after the file system exists.
LINKED = {"s3_uri": "s3://bucket-1/datasets/train"}


@pytest.mark.parametrize("retention", [{"backup_retention_days": 0, "allow_no_backups": True}, {}])
def test_linked_persistent2_takes_no_backups(retention):
    fs, protect = _lustre_resource(FsxConfig(deployment_type="PERSISTENT_2", data_repository=LINKED, **retention))
    assert fs["automaticBackupRetentionDays"] == 0  # explicit: turns off what an unlinked config asked for
    assert "dailyAutomaticBackupStartTime" not in fs
    assert fs["skipFinalBackup"] is True  # a final backup of a linked file system fails the delete
    # Fixed at creation, before the association exists; kept so that linking or
    # unlinking S3 (in place) never replaces the file system.
    assert fs["copyTagsToBackups"] is True
    assert fs["tags"]["GpuClusterDataRepository"] == "s3://bucket-1"
    assert protect is True  # still protected: /fsx holds what was not exported yet


def test_linked_persistent1_takes_no_backups():
    fs, protect = _lustre_resource(
        FsxConfig(
            deployment_type="PERSISTENT_1",
            per_unit_storage_throughput=200,
            data_repository=LINKED,
            backup_retention_days=0,
            allow_no_backups=True,
        )
    )
    assert fs["importPath"] == "s3://bucket-1/datasets/train"
    assert fs["automaticBackupRetentionDays"] == 0
    assert "dailyAutomaticBackupStartTime" not in fs
    assert fs["skipFinalBackup"] is True
    # FSx does not take CopyTagsToBackups on a file system created linked [FSX-CREATEFS-LUSTRE].
    assert "copyTagsToBackups" not in fs
    assert fs["tags"]["GpuClusterDataRepository"] == "s3://bucket-1"
    assert protect is True


def test_unlinked_persistent1_is_backed_up():
    fs, _ = _lustre_resource(FsxConfig(deployment_type="PERSISTENT_1", per_unit_storage_throughput=200))
    assert "importPath" not in fs
    assert fs["automaticBackupRetentionDays"] == 7 and fs["dailyAutomaticBackupStartTime"] == "03:00"
    assert fs["skipFinalBackup"] is False and fs["copyTagsToBackups"] is True


def test_protect_and_backups_are_opt_out():
    fs, protect = _lustre_resource(FsxConfig(protect=False, backup_retention_days=0, allow_no_backups=True))
    assert protect is False
    assert fs["automaticBackupRetentionDays"] == 0 and "dailyAutomaticBackupStartTime" not in fs
    assert fs["skipFinalBackup"] is False


def test_allow_replace_lifts_protect_for_that_up():
    _, protect = _lustre_resource(FsxConfig(allow_replace=True))
    assert protect is False


@pytest.mark.parametrize("dt", ["SCRATCH_1", "SCRATCH_2"])
def test_scratch_has_no_backups_and_no_default_protect(dt):
    fs, protect = _lustre_resource(
        FsxConfig(deployment_type=dt, storage_capacity_gib=1200, per_unit_storage_throughput=None)
    )
    assert protect is False
    for key in ("automaticBackupRetentionDays", "dailyAutomaticBackupStartTime", "copyTagsToBackups"):
        assert key not in fs
    assert fs["skipFinalBackup"] is True  # FSx has no final backup for scratch


def test_linked_scratch2_has_no_backups():
    fs, protect = _lustre_resource(
        FsxConfig(
            deployment_type="SCRATCH_2",
            storage_capacity_gib=1200,
            per_unit_storage_throughput=None,
            data_repository=LINKED,
        )
    )
    assert fs["importPath"] == fs["exportPath"] == "s3://bucket-1/datasets/train"
    for key in ("automaticBackupRetentionDays", "dailyAutomaticBackupStartTime", "copyTagsToBackups"):
        assert key not in fs
    assert fs["skipFinalBackup"] is True and protect is False


def test_file_system_depends_on_every_self_rule_of_its_group():
    """FSx refuses creation while port 988 is closed [FSX-SG-FAIL], and the group starts
    with no rules [PA-SG]: the file system is created only after the self rules that
    open the Lustre ports, not merely after the group (which let the engine create the
    file system and the rules at once: aws-parallelcluster hit the same race [PC-6181])."""
    from tests.support.mocks import run_program, valid_raw

    run = run_program(valid_raw())
    rules = [
        r
        for r in run.resources
        if r["type"].startswith("aws:vpc/securityGroup") and r["inputs"].get("referencedSecurityGroupId")
    ]
    assert sorted(r["name"] for r in rules) == ["t1-self-in", "t1-self-out"]
    (fs,) = run.of_type(FS)
    for rule in rules:
        assert run.urns[f"{rule['name']}|{rule['type']}"] in fs["dependencies"], rule["name"]
