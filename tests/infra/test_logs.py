"""The cluster's log group, dashboard and the roles' grants on them, under mocks (infra/logs.py).

Exact inputs: the log group's name, retention, key and tags; the dashboard's name and
body; the workers' and the controller's policies (the controller alone may publish
metrics, only in its namespace). `logs.enabled: false` declares none of it and grants
nothing; the outputs name the group, dashboard and namespace."""

from __future__ import annotations

import json

from model import logs
from tests.support.mocks import run_program, valid_raw

GROUP = "aws:cloudwatch/logGroup:LogGroup"
DASHBOARD = "aws:cloudwatch/dashboard:Dashboard"
POLICY = "aws:iam/rolePolicy:RolePolicy"
ARN = "arn:aws:logs:us-east-2:123456789012:log-group:/gpu-cluster/dev"
KEY = "arn:aws:kms:us-east-2:123456789012:key/0b1e2f3a-4c5d-6e7f-8091-a2b3c4d5e6f7"


def test_log_group_dashboard_and_grants_exactly():
    raw = valid_raw()
    raw["logs"] = {"retention_days": 90, "kms_key_arn": KEY}
    run = run_program(raw)
    assert run.inputs(GROUP, "t1-logs") == {
        "name": "/gpu-cluster/dev",
        "retentionInDays": 90,
        "kmsKeyId": KEY,
        "tags": {"GpuClusterName": "t1", "Name": "t1-logs", "team": "ml"},
    }
    board = run.inputs(DASHBOARD, "t1-dashboard")
    assert board["dashboardName"] == "gpu-cluster-dev"
    body = json.loads(board["dashboardBody"])
    assert body == logs.dashboard_body("dev", "us-east-2")
    metrics = [m for w in body["widgets"] if w["type"] == "metric" for m in w["properties"]["metrics"]]
    assert metrics == [["GpuCluster/dev", n] for n in (*logs.NODE_METRICS, *logs.JOB_METRICS, logs.GATE_METRIC)]
    (query,) = [w["properties"]["query"] for w in body["widgets"] if w["type"] == "log"]
    assert query.startswith("SOURCE '/gpu-cluster/dev' | ")
    ship = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ShipNodeLogs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"],
                "Resource": [ARN, f"{ARN}:*"],
            }
        ],
    }
    for name in ("t1-logs", "t1-controller-logs"):
        assert json.loads(run.inputs(POLICY, name)["policy"]) == ship, name
    assert run.inputs(POLICY, "t1-logs")["role"].startswith("t1-role-")
    assert run.inputs(POLICY, "t1-controller-logs")["role"].startswith("t1-controller-role-")
    metrics_policy = run.inputs(POLICY, "t1-controller-metrics")
    assert metrics_policy["role"].startswith("t1-controller-role-")
    assert json.loads(metrics_policy["policy"]) == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "PublishClusterMetrics",
                "Effect": "Allow",
                "Action": "cloudwatch:PutMetricData",
                "Resource": "*",
                "Condition": {"StringEquals": {"cloudwatch:namespace": "GpuCluster/dev"}},
            }
        ],
    }
    assert "t1-metrics" not in {r["name"] for r in run.of_type(POLICY)}  # workers publish nothing
    assert (
        run.parent_type(GROUP, "t1-logs")
        == run.parent_type(DASHBOARD, "t1-dashboard")
        == "gpu-cluster:index:ClusterLogs"
    )


def test_logs_disabled_declares_and_grants_nothing():
    raw = valid_raw()
    raw["logs"] = {"enabled": False}
    run = run_program(raw)
    assert run.of_type(GROUP) == run.of_type(DASHBOARD) == []
    assert not [r for r in run.of_type(POLICY) if r["name"].endswith(("-logs", "-metrics"))]
    assert b"LOGS_ENABLED=0" in run.node_files.files["/etc/gpu-cluster/cluster.env"]
    assert "/opt/gpu-cluster/templates/cloudwatch-agent-node.json" not in run.node_files.files


def test_outputs_name_the_group_dashboard_and_namespace():
    from offline.mocks import run_under_mocks

    _, _, outputs, _ = run_under_mocks(valid_raw(), "us-east-2")
    assert outputs["logs"] == {
        "log_group_name": "/gpu-cluster/dev",
        "dashboard_name": "gpu-cluster-dev",
        "metrics_namespace": "GpuCluster/dev",
    }
