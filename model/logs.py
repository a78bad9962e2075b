"""`logs`: logs and metrics that outlive nodes (CloudWatch), on by default.

A terminated node takes its disk with it: the boot log, cloud-init's output and the
slurmd log of the node that failed are exactly what an operator needs afterwards. Every
node runs the Amazon CloudWatch agent [CW-AGENT] (installed by step 20 like Enroot: a
pinned download, model/pins.py; configured and started by step 25) and ships those
files to one log group per cluster; the controller also ships slurmctld's and
slurmdbd's logs and the validation reports on /fsx, and publishes a few cluster metrics
(nodes idle/allocated/drained/down, jobs pending/running, the gate's verdict) with
PutMetricData from its agent loop (nodeside/cluster_metrics.py). The program declares
the log group (retention from here, an optional KMS key) and a dashboard
(infra/logs.py); `ops logs NODE [--step S]` reads the streams (docs/logs.md).

Names: the log group, metric namespace and dashboard derive from the stack name
(ClusterConfig.aws_name_base), like the Auto Scaling groups, so two stacks never share
them. A log stream is `<node name>/<instance id>/<log>`: a node name (its IPv4) can come
back on a later instance, the instance id cannot.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from model.base import Strict
from model.paths import loc_to_path

# CloudWatch Logs' accepted retention periods [CW-RETENTION] (PutRetentionPolicy).
RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)
DEFAULT_RETENTION_DAYS = 30
# A customer managed key for the log group [CW-KMS]: `arn:<partition>:kms:<region>:<account>:key/<id>`.
_KMS_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")

# The streams a node writes (step 25, userdata/cloudwatch_agent.py), by the short name
# `ops logs --log` takes; the file each comes from is in the agent's configuration.
NODE_LOGS = ("boot", "cloud-init", "slurmd", "on-node-ready")
CONTROLLER_LOGS = ("slurmctld", "slurmdbd")
# The validation reports are the cluster's, not a node's: one stream, written by the
# controller (they are on /fsx, so every node could read them; one shipper only).
VALIDATION_STREAM = "cluster/validation"
# How often the controller's agent loop publishes the metrics (s): CloudWatch's standard
# resolution is one minute [CW-METRICS]; one PutMetricData call carries all of them.
METRICS_INTERVAL = 60


class LogsConfig(Strict):
    enabled: bool = Field(
        True,
        description="Ship node logs (boot, cloud-init, Slurm, validation reports) to CloudWatch Logs and publish cluster metrics (docs/logs.md).",
    )
    retention_days: int = Field(
        DEFAULT_RETENTION_DAYS,
        description="Days CloudWatch Logs keeps the cluster's log events (one of CloudWatch's retention periods).",
    )
    kms_key_arn: str | None = Field(
        None,
        description="A KMS key to encrypt the log group with (its key policy must allow CloudWatch Logs); default: CloudWatch Logs' own encryption.",
    )

    @field_validator("retention_days")
    @classmethod
    def _retention(cls, v: int) -> int:
        if v not in RETENTION_DAYS:
            near = min(RETENTION_DAYS, key=lambda d: (abs(d - v), d))
            raise ValueError(
                f"{v} is not a CloudWatch Logs retention period; use one of {', '.join(map(str, RETENTION_DAYS))} (nearest: {near})"
            )
        return v

    @field_validator("kms_key_arn")
    @classmethod
    def _kms(cls, v: str | None) -> str | None:
        if v is not None and not _KMS_KEY_ARN.match(v):
            raise ValueError(
                f"'{v}' is not a KMS key ARN; use arn:aws:kms:<region>:<account>:key/<key id> (aws kms describe-key --key-id alias/<name>)"
            )
        return v


def log_group_name(aws_name_base: str) -> str:
    return f"/gpu-cluster/{aws_name_base}"


def metrics_namespace(aws_name_base: str) -> str:
    """One namespace per cluster: the controller's PutMetricData permission is scoped to it
    (the `cloudwatch:namespace` condition key [CW-IAM]), so no cluster writes another's."""
    return f"GpuCluster/{aws_name_base}"


def dashboard_name(aws_name_base: str) -> str:
    return f"gpu-cluster-{aws_name_base}"


def stream_prefix(node: str) -> str:
    """Every stream of the instances that carried Slurm node name `node`."""
    return f"{node}/"


def logs_problems(logs: LogsConfig, region: str | None) -> list[tuple[str, str]]:
    """A KMS key of another region cannot encrypt this region's log group [CW-KMS]."""
    key = logs.kms_key_arn
    if not (logs.enabled and key and region):
        return []
    key_region = key.split(":")[3]
    if key_region != region:
        return [
            (
                loc_to_path(("logs", "kms_key_arn")),
                f"the key is in {key_region}, the stack in {region}; CloudWatch Logs needs a key of the log group's region",
            )
        ]
    return []


# The metrics the controller publishes (nodeside/cluster_metrics.py), in the dashboard's order.
NODE_METRICS = ("NodesIdle", "NodesAllocated", "NodesDrained", "NodesDown")
JOB_METRICS = ("JobsPending", "JobsRunning")
GATE_METRIC = "GateGo"  # 1: the latest first-boot gate said GO, 0: NO-GO
# What the dashboard's log table looks for: a failed boot step, a NO-GO, the agents' errors.
FAILURE_FILTER = r"/FAILED|NO-GO|access denied|error/"


def dashboard_body(aws_name_base: str, region: str) -> dict:
    """The cluster's CloudWatch dashboard [CW-DASHBOARD]: node states, the queue, the
    gate's verdict over time, and the log lines that say something failed."""
    ns = metrics_namespace(aws_name_base)

    def metric_widget(title: str, names: tuple[str, ...], x: int, y: int, stacked: bool) -> dict:
        return {
            "type": "metric",
            "x": x,
            "y": y,
            "width": 8,
            "height": 6,
            "properties": {
                "title": title,
                "region": region,
                "metrics": [[ns, n] for n in names],
                "stat": "Maximum",
                "period": METRICS_INTERVAL,
                "view": "timeSeries",
                "stacked": stacked,
            },
        }

    query = (
        f"SOURCE '{log_group_name(aws_name_base)}' | fields @timestamp, @logStream, @message"
        f" | filter @message like {FAILURE_FILTER} | sort @timestamp desc | limit 100"
    )
    return {
        "widgets": [
            metric_widget("Nodes", NODE_METRICS, 0, 0, stacked=True),
            metric_widget("Jobs", JOB_METRICS, 8, 0, stacked=False),
            metric_widget("First-boot gate (1 GO, 0 NO-GO)", (GATE_METRIC,), 16, 0, stacked=False),
            {
                "type": "log",
                "x": 0,
                "y": 6,
                "width": 24,
                "height": 8,
                "properties": {"title": "Failures in the node logs", "region": region, "query": query, "view": "table"},
            },
        ]
    }
