"""The accounting database under mocks: exact RDS resources, the controller's one grant, outputs.

A stack with accounting declares a DB subnet group over the cluster subnet and a second
one, a parameter group with slurmdbd's setting, and one encrypted, private, protected
RDS for MariaDB instance in the nodes' security group whose password RDS generates into
Secrets Manager; the controller's role, and no other, gets GetSecretValue on exactly
that secret. A created VPC gets its own database subnet in another zone. A stack
without accounting declares none of it.
"""

from __future__ import annotations

import json

import pytest

from tests.support.mocks import run_program, valid_raw

DB = "aws:rds/instance:Instance"
SUBNETS = "aws:rds/subnetGroup:SubnetGroup"
PARAMS = "aws:rds/parameterGroup:ParameterGroup"
POLICY = "aws:iam/rolePolicy:RolePolicy"
SECOND = "subnet-0b1b2c3d4e5f60719"
SECRET = "arn:aws:secretsmanager:us-east-2:123456789012:secret:rds!db-"


def _raw(**accounting):
    raw = valid_raw()
    raw["accounting"] = {"enabled": True, "second_subnet_id": SECOND, **accounting}
    return raw


@pytest.fixture(scope="module")
def team():
    """One program run with accounting, shared by the tests that only read it."""
    return run_program(_raw())


def test_the_database_is_small_encrypted_private_protected_and_generates_its_own_password(team):
    run = team
    db = run.inputs(DB, "t1-db")
    sg = run.of_type("aws:ec2/securityGroup:SecurityGroup")[0]
    assert db == {
        "identifier": "gpu-cluster-dev-accounting",
        "engine": "mariadb",
        "engineVersion": "10.11",
        "instanceClass": "db.t4g.small",
        "allocatedStorage": 20,
        "storageType": "gp3",
        "storageEncrypted": True,
        "username": "slurmdbd",
        "manageMasterUserPassword": True,
        "port": 3306,
        "dbSubnetGroupName": "gpu-cluster-dev-accounting",
        "parameterGroupName": "gpu-cluster-dev-accounting",
        "vpcSecurityGroupIds": [db["vpcSecurityGroupIds"][0]],
        "availabilityZone": "us-east-2b",
        "multiAz": False,
        "publiclyAccessible": False,
        "backupRetentionPeriod": 7,
        "backupWindow": "03:30-04:00",
        "maintenanceWindow": "sun:04:30-sun:05:00",
        "autoMinorVersionUpgrade": True,
        "copyTagsToSnapshot": True,
        "deletionProtection": True,
        "skipFinalSnapshot": False,
        "finalSnapshotIdentifier": "gpu-cluster-dev-accounting-final",
        "tags": {"GpuClusterName": "t1", "Name": "t1-accounting", "team": "ml"},
    }
    assert db["vpcSecurityGroupIds"][0].startswith("sg-") and sg["name"].startswith("t1")
    assert not any("password" in k.lower() and k != "manageMasterUserPassword" for k in db)
    assert run.inputs(SUBNETS, "t1-db-subnets")["subnetIds"] == ["subnet-0a1b2c3d4e5f60718", SECOND]
    params = run.inputs(PARAMS, "t1-db-params")
    assert params["family"] == "mariadb10.11"
    assert [(p["name"], p["value"]) for p in params["parameters"]] == [("innodb_lock_wait_timeout", "900")]


def test_the_database_is_protected_from_the_engine_too_unless_the_stack_says_otherwise(team):
    (db,) = team.of_type(DB)
    assert db["options"]["protect"] is True
    (db,) = run_program(_raw(protect=False)).of_type(DB)
    assert db["options"]["protect"] is False
    assert (db["inputs"]["deletionProtection"], db["inputs"]["skipFinalSnapshot"]) == (False, True)
    assert "finalSnapshotIdentifier" not in db["inputs"]


def test_only_the_controller_role_reads_exactly_the_managed_secret(team):
    run = team
    policies = {r["name"]: r["inputs"] for r in run.of_type(POLICY)}
    (name,) = [n for n in policies if "accounting" in n]
    assert name == "t1-controller-accounting-secret"
    doc = json.loads(policies[name]["policy"])
    (arn,) = [r["inputs"]["policy"] for r in run.of_type(POLICY) if r["name"] == name]
    assert doc == {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": doc["Statement"][0]["Resource"]}
        ],
    }
    assert doc["Statement"][0]["Resource"].startswith(SECRET) and arn
    assert policies[name]["role"].startswith("t1-controller-role-")
    others = [json.loads(p["policy"]) for n, p in policies.items() if n != name]
    assert not any("secretsmanager" in json.dumps(d) for d in others)


def test_the_nodes_learn_the_endpoint_and_secret_arn_and_the_outputs_name_them(team):
    run = team
    env = run.node_files.files["/etc/gpu-cluster/cluster.env"].decode()
    host = "gpu-cluster-dev-accounting.c0a1b2c3d4e5.us-east-2.rds.amazonaws.com"
    assert f"ACCOUNTING_DB_HOST={host}\n" in env and "ACCOUNTING_DB_PORT=3306\n" in env
    assert f"ACCOUNTING_DB_SECRET_ARN='{SECRET}" in env or f"ACCOUNTING_DB_SECRET_ARN={SECRET}" in env
    out = run.value["accounting_database"]
    assert out["identifier"] == "gpu-cluster-dev-accounting" and out["address"] == host and out["port"] == 3306
    assert out["secret_arn"].startswith(SECRET)
    conf = run.node_files.files["/opt/gpu-cluster/templates/slurm.conf"].decode()
    assert (
        "AccountingStorageType=accounting_storage/slurmdbd\n" in conf and "PriorityType=priority/multifactor\n" in conf
    )


def test_a_created_vpc_gets_a_database_subnet_in_another_zone():
    raw = valid_raw()
    raw["network"] = {"availability_zone": "us-east-2b"}
    raw["accounting"] = {"enabled": True}
    run = run_program(raw)
    sub = run.inputs("aws:ec2/subnet:Subnet", "t1-database")
    assert (sub["availabilityZone"], sub["cidrBlock"], sub["mapPublicIpOnLaunch"]) == (
        "us-east-2a",
        "10.0.128.0/18",
        False,
    )
    ids = run.inputs(SUBNETS, "t1-db-subnets")["subnetIds"]
    assert len(ids) == 2 and all(i.startswith("subnet-") for i in ids) and ids[0] != ids[1]


def test_without_accounting_nothing_is_declared_and_the_nodes_get_no_accounting_lines():
    run = run_program(valid_raw())
    assert not [t for t, _ in run.custom() if t.startswith("aws:rds")]
    assert not [r for r in run.of_type(POLICY) if "accounting" in r["name"]]
    assert "accounting_database" not in run.value
    files = run.node_files.files
    assert "ACCOUNTING" not in files["/etc/gpu-cluster/cluster.env"].decode()
    assert "/opt/gpu-cluster/templates/slurmdbd.conf" not in files
    assert "Accounting" not in files["/opt/gpu-cluster/templates/slurm.conf"].decode()
