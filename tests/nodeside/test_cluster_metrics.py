"""nodeside/cluster_metrics.py: the cluster's metrics from Slurm's own output shapes, and the
one PutMetricData call, against botocore's Stubber (the service model checks the request).

`sinfo`/`squeue` are stubs on PATH printing what Slurm prints (`sinfo -N` lists a node once
per partition; states carry suffixes: `*` not responding, `~` powered off, `$`
maintenance); the gate's latest report is a file on the test's /fsx."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from nodeside import aws_client, cluster_metrics

SINFO = """ip-10-0-1-5|idle
ip-10-0-1-5|idle
ip-10-0-1-6|mixed
ip-10-0-1-7|allocated
ip-10-0-1-8|draining
ip-10-0-1-9|drained
ip-10-0-1-10|idle*
ip-10-0-1-11|down*
ip-10-0-1-12|reserved
ip-10-0-1-13|completing
ip-10-0-1-14|idle~
ip-10-0-1-15|inval
ip-10-0-1-16|drained$
"""
SQUEUE = "PENDING\nPENDING\nRUNNING\nCOMPLETING\nCONFIGURING\nPENDING\nSUSPENDED\n"
NOW = 1_796_083_200.0


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, out in (("sinfo", SINFO), ("squeue", SQUEUE)):
        (tmp_path / f"{name}.out").write_text(out)
        p = bin_dir / name
        p.write_text(f'#!/bin/sh\necho "$*" >>{tmp_path}/{name}.args\ncat {tmp_path}/{name}.out\n')
        p.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    fsx = tmp_path / "fsx"
    (fsx / "validation" / "run-7").mkdir(parents=True)
    monkeypatch.setenv("FSX_ROOT", str(fsx))
    monkeypatch.setenv("METRICS_NAMESPACE", "GpuCluster/dev")
    return tmp_path


def _gate(fsx: Path, verdict: str) -> None:
    (fsx / "validation" / "run-7" / "report.json").write_text(json.dumps({"verdict": verdict}))
    (fsx / "validation" / "latest").write_text("run-7\n")


def test_counts_each_node_once_by_its_state_and_jobs_by_theirs(slurm):
    vals = cluster_metrics.values(str(slurm / "fsx" / "validation"))
    assert vals == {
        "NodesIdle": 3,  # idle, reserved, idle~ (powered off but free)
        "NodesAllocated": 3,  # mixed, allocated, completing
        "NodesDrained": 3,  # draining, drained, drained$
        "NodesDown": 3,  # idle* and down* (not responding), inval
        "JobsPending": 3,
        "JobsRunning": 3,  # running, completing, configuring
    }  # no GateGo before the first gate run
    assert (slurm / "sinfo.args").read_text() == "-h -N -o %N|%T\n"
    assert (slurm / "squeue.args").read_text() == "-h -r -o %T\n"


@pytest.mark.parametrize(("verdict", "go"), [("GO", 1), ("NO-GO", 0)])
def test_one_put_metric_data_in_the_clusters_namespace(slurm, verdict, go):
    _gate(slurm / "fsx", verdict)
    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")
    cw = aws_client.client("cloudwatch", region="us-east-2", session=session)
    stamp = dt.datetime.fromtimestamp(NOW, tz=dt.UTC)
    want = {"NodesIdle": 3, "NodesAllocated": 3, "NodesDrained": 3, "NodesDown": 3, "JobsPending": 3, "JobsRunning": 3}
    data = [{"MetricName": k, "Value": float(v), "Unit": "Count", "Timestamp": stamp} for k, v in want.items()]
    data.append({"MetricName": "GateGo", "Value": float(go), "Unit": "Count", "Timestamp": stamp})
    with Stubber(cw) as stub:
        stub.add_response("put_metric_data", {}, {"Namespace": "GpuCluster/dev", "MetricData": data})
        assert cluster_metrics.main(["publish", "--now", str(NOW)], cw=cw) == 0
        stub.assert_no_pending_responses()


def test_a_refusal_is_one_line_naming_the_grant_and_exit_1(slurm, capsys):
    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")
    cw = aws_client.client("cloudwatch", region="us-east-2", session=session)
    with Stubber(cw) as stub:
        stub.add_client_error("put_metric_data", "AccessDenied", "not authorized to perform: cloudwatch:PutMetricData")
        assert cluster_metrics.main(["publish", "--now", str(NOW)], cw=cw) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("metrics: GpuCluster/dev: cloudwatch:PutMetricData: access denied (AccessDenied)")


def test_slurm_unreachable_publishes_nothing(slurm, capsys):
    (slurm / "bin" / "sinfo").write_text(
        "#!/bin/sh\necho 'slurm_load_node: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    assert cluster_metrics.main(["publish"], cw=object()) == 1  # no client call at all
    assert "Unable to contact slurm controller" in capsys.readouterr().err


def test_show_prints_without_aws(slurm, capsys):
    _gate(slurm / "fsx", "GO")
    assert cluster_metrics.main(["show"]) == 0
    assert capsys.readouterr().out.strip().endswith("JobsRunning=3 GateGo=1")
