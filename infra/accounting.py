"""The accounting database: RDS for MariaDB behind the controller's slurmdbd.

Why this engine and size, where the password lives and who reads it: model/accounting.py.
The instance sits in the cluster's AZ (no cross-AZ hops between slurmdbd and its
database) and in the nodes' security group, whose only inbound rule admits the group
itself: the controller reaches port 3306, nothing outside the cluster does, and it has
no public address. A DB subnet group must cover two AZs [RDS-SUBNETS]: the cluster's
subnet plus `second_subnet_id` (the program's own in a created VPC).

Data safety, like the file system's (infra/storage.py): with `accounting.protect`
(default) Pulumi `protect` and RDS deletion protection both refuse a delete, and a
delete that is let through takes a final snapshot; automated backups are kept
`backup_retention_days`. Storage is encrypted with the account's RDS key.

slurmdbd's database settings: Slurm's accounting guide asks for
innodb_lock_wait_timeout=900 (rollups and purges hold locks for minutes on large
tables) [SLURM-ACCT]; RDS sizes the buffer pool from the class's memory (3/4 by default).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.component import Component
from model import accounting

BACKUP_WINDOW = "03:30-04:00"  # UTC, after the file system's 03:00 backup
MAINTENANCE_WINDOW = "sun:04:30-sun:05:00"
PARAMETERS = {"innodb_lock_wait_timeout": "900"}


def parameter_family() -> str:
    return f"{accounting.ENGINE}{accounting.ENGINE_VERSION}"


@dataclass
class AccountingDatabaseArgs:
    cluster_name: str
    config: accounting.AccountingConfig
    identifier: str  # model/accounting.py db_identifier
    availability_zone: str
    subnet_ids: list[pulumi.Input[str]]  # the cluster's subnet first, then one in another AZ
    security_group_id: pulumi.Input[str]
    tags: dict[str, str] = field(default_factory=dict)


class AccountingDatabase(Component):
    """Outputs: address, port, secret_arn (the RDS-managed master secret), arn."""

    TYPE = "gpu-cluster:index:AccountingDatabase"
    address: pulumi.Output[str]
    port: pulumi.Output[int]
    secret_arn: pulumi.Output[str]

    def __init__(self, name: str, args: AccountingDatabaseArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, opts)
        cfg = args.config
        tags = {**args.tags, "Name": f"{args.cluster_name}-accounting"}
        subnets = aws.rds.SubnetGroup(
            f"{name}-db-subnets",
            name=args.identifier,
            description=f"gpu-cluster {args.cluster_name} accounting database (cluster subnet + one in another AZ)",
            subnet_ids=args.subnet_ids,
            tags=tags,
            opts=self.child,
        )
        params = aws.rds.ParameterGroup(
            f"{name}-db-params",
            name=args.identifier,
            family=parameter_family(),
            description=f"gpu-cluster {args.cluster_name} slurmdbd settings",
            parameters=[aws.rds.ParameterGroupParameterArgs(name=k, value=v) for k, v in sorted(PARAMETERS.items())],
            tags=tags,
            opts=self.child,
        )
        db = aws.rds.Instance(
            f"{name}-db",
            identifier=args.identifier,
            engine=accounting.ENGINE,
            engine_version=accounting.ENGINE_VERSION,
            instance_class=cfg.instance_class,
            allocated_storage=cfg.storage_gib,
            storage_type="gp3",
            storage_encrypted=True,
            username=accounting.MASTER_USER,
            # RDS generates the password and keeps it in Secrets Manager [RDS-SM]: it
            # never passes through this program, its state or its outputs.
            manage_master_user_password=True,
            port=accounting.PORT,
            db_subnet_group_name=subnets.name,
            parameter_group_name=params.name,
            vpc_security_group_ids=[args.security_group_id],
            availability_zone=args.availability_zone,
            multi_az=False,
            publicly_accessible=False,
            backup_retention_period=cfg.backup_retention_days,
            backup_window=BACKUP_WINDOW,
            maintenance_window=MAINTENANCE_WINDOW,
            auto_minor_version_upgrade=True,
            copy_tags_to_snapshot=True,
            deletion_protection=cfg.protect,
            skip_final_snapshot=not cfg.protect,
            final_snapshot_identifier=f"{args.identifier}-final" if cfg.protect else None,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, protect=cfg.protect),
        )
        self.address = db.address
        self.port = db.port
        self.arn = db.arn
        self.secret_arn = db.master_user_secrets.apply(_secret_arn)
        self.register_outputs({"address": db.address, "port": db.port, "secret_arn": self.secret_arn})


def _secret_arn(secrets) -> str:
    """The ARN of the secret RDS created (one per instance with a managed password)."""
    if not secrets:
        raise ValueError("RDS returned no master user secret although manage_master_user_password is set")
    first = secrets[0]
    arn = first.get("secret_arn") if isinstance(first, dict) else first.secret_arn
    return str(arn)


def secret_read_policy(secret_arn: str) -> str:
    """The controller role's one permission for accounting: read exactly this secret.

    The secret is encrypted with Secrets Manager's AWS managed key unless a customer key
    is named, so GetSecretValue alone suffices [RDS-SM]."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": secret_arn}],
        },
        sort_keys=True,
    )
