"""The cluster's log group and dashboard (model/logs.py), and the nodes' grants on them.

One log group per cluster, named from the stack (`/gpu-cluster/<stack>`), kept
`logs.retention_days` and encrypted with `logs.kms_key_arn` when given (CloudWatch Logs
encrypts every group otherwise [CW-KMS]). The program creates it, so no node may create
or delete groups or change their retention: the nodes' agents only create streams in it
and put events (`logs_write_policy`), and only the controller publishes metrics, only
in this cluster's namespace (`metrics_put_policy`). The dashboard reads both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.component import Component
from model import logs


@dataclass
class ClusterLogsArgs:
    cluster_name: str
    aws_name_base: str
    region: str
    config: logs.LogsConfig
    tags: dict[str, str] = field(default_factory=dict)


class ClusterLogs(Component):
    """Outputs: log_group_name, log_group_arn, dashboard_name."""

    TYPE = "gpu-cluster:index:ClusterLogs"
    log_group_name: pulumi.Output[str]
    log_group_arn: pulumi.Output[str]
    dashboard_name: pulumi.Output[str]

    def __init__(self, name: str, args: ClusterLogsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, opts)
        group = aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=logs.log_group_name(args.aws_name_base),
            retention_in_days=args.config.retention_days,
            kms_key_id=args.config.kms_key_arn,
            tags={**args.tags, "Name": f"{args.cluster_name}-logs"},
            opts=self.child,
        )
        dashboard = aws.cloudwatch.Dashboard(
            f"{name}-dashboard",
            dashboard_name=logs.dashboard_name(args.aws_name_base),
            dashboard_body=json.dumps(logs.dashboard_body(args.aws_name_base, args.region), sort_keys=True),
            opts=self.child,
        )
        self.log_group_name = group.name
        self.log_group_arn = group.arn
        self.dashboard_name = dashboard.dashboard_name
        self.register_outputs(
            {"log_group_name": group.name, "log_group_arn": group.arn, "dashboard_name": dashboard.dashboard_name}
        )


def logs_write_policy(log_group_arn: str) -> str:
    """What a node's CloudWatch agent needs, on this cluster's group alone: streams in it
    and events in them [CW-AGENT-IAM]. The provider's `arn` has no `:*`; the streams are
    `<group arn>:log-stream:<name>` (group names cannot hold `:`, so `<arn>:*` is exactly
    this group's streams). No CreateLogGroup, no PutRetentionPolicy: the program owns those."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "ShipNodeLogs",
                    "Effect": "Allow",
                    "Action": ["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"],
                    "Resource": [log_group_arn, f"{log_group_arn}:*"],
                }
            ],
        },
        sort_keys=True,
    )


def metrics_put_policy(namespace: str) -> str:
    """The controller's metrics (nodeside/cluster_metrics.py): PutMetricData has no
    resource type, so IAM scopes it by the `cloudwatch:namespace` condition key [CW-IAM]."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "PublishClusterMetrics",
                    "Effect": "Allow",
                    "Action": "cloudwatch:PutMetricData",
                    "Resource": "*",
                    "Condition": {"StringEquals": {"cloudwatch:namespace": namespace}},
                }
            ],
        },
        sort_keys=True,
    )
