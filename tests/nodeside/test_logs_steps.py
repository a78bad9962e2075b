"""Logs on the node: step 25 (the CloudWatch agent's configuration filled in and loaded)
and the controller's metrics tick (lib/metrics.sh).

Step 25 runs with a stub amazon-cloudwatch-agent-ctl that records its arguments and the
files it was given; step 20's install of the agent (a real gpg signature check) is
tested with the packages step (tests/nodeside/test_packages_step.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.block_end import COMMON, LIB
from tests.support.user_data import config
from userdata import cloudwatch_agent as cw

BOOT = Path(__file__).resolve().parents[2] / "nodeside"

# --- step 25 ----------------------------------------------------------------------------

CTL = """#!/usr/bin/env bash
echo "$*" >>"$STUB_LOG"
for a; do [[ $a == file:* ]] && cp "${a#file:}" "$STUB_DIR/$(basename "${a#file:}").seen"; done
if [[ $* == "-a status" ]]; then echo '{"status": "'"${STUB_STATUS:-running}"'", "version": "1.300064.1b1344"}'; fi
"""


def _step25(tmp_path: Path, role: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    files = cw.cloudwatch_files(config())
    for path, text in files.items():
        p = tmp_path / "templates" / Path(path).name
        p.parent.mkdir(exist_ok=True)
        p.write_text(text)
    ctl = tmp_path / "ctl"
    ctl.write_text(CTL)
    ctl.chmod(0o755)
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "identity.env").write_text(
        f"INSTANCE_ID='i-0123456789abcdef0'\nNODE_NAME='ip-10-0-1-6'\nNODE_ROLE='{role}'\n"
    )
    base = {
        "PATH": "/usr/bin:/bin",
        "GPU_CLUSTER_HOME": str(BOOT),
        "GPU_CLUSTER_STATE": str(tmp_path / "state"),
        "GC_REASON_FILE": str(tmp_path / "reason"),
        "LOGS_ENABLED": "1",
        "LOG_GROUP": "/gpu-cluster/demo",
        "CLOUDWATCH_AGENT_CTL": str(ctl),
        "CLOUDWATCH_AGENT_ETC": str(tmp_path / "etc"),
        "CLOUDWATCH_AGENT_NODE_CONFIG": str(tmp_path / "templates" / "cloudwatch-agent-node.json"),
        "CLOUDWATCH_AGENT_CONTROLLER_CONFIG": str(tmp_path / "templates" / "cloudwatch-agent-controller.json"),
        "STUB_LOG": str(tmp_path / "ctl.log"),
        "STUB_DIR": str(tmp_path),
    }
    r = subprocess.run(
        ["bash", str(BOOT / "steps" / "25-logs.sh")], env={**base, **env}, capture_output=True, text=True, timeout=30
    )
    log = tmp_path / "ctl.log"
    return r, log.read_text().splitlines() if log.exists() else []


def test_step_25_fills_the_node_and_starts_the_agent_workers_with_one_file(tmp_path):
    r, calls = _step25(tmp_path, "worker")
    assert r.returncode == 0, r.stdout + r.stderr
    etc = tmp_path / "etc"
    assert calls == [f"-a fetch-config -m ec2 -c file:{etc}/node.json -s", "-a status"]
    doc = json.loads((tmp_path / "node.json.seen").read_text())
    streams = [c["log_stream_name"] for c in doc["logs"]["logs_collected"]["files"]["collect_list"]]
    assert streams == [f"ip-10-0-1-6/i-0123456789abcdef0/{s}" for s in ("boot", "cloud-init", "slurmd")]
    assert "logs go to /gpu-cluster/demo as ip-10-0-1-6/i-0123456789abcdef0/<log>" in r.stdout


def test_step_25_appends_the_controllers_file_then_starts(tmp_path):
    r, calls = _step25(tmp_path, "controller")
    assert r.returncode == 0, r.stdout + r.stderr
    etc = tmp_path / "etc"
    assert calls == [
        f"-a fetch-config -m ec2 -c file:{etc}/node.json",
        f"-a append-config -m ec2 -c file:{etc}/controller.json -s",
        "-a status",
    ]
    assert "ip-10-0-1-6/i-0123456789abcdef0/slurmctld" in (tmp_path / "controller.json.seen").read_text()


def test_step_25_fails_when_the_agent_does_not_run_and_skips_when_told(tmp_path):
    r, _ = _step25(tmp_path, "worker", STUB_STATUS="stopped")
    assert r.returncode == 1 and (tmp_path / "reason").read_text().startswith("the CloudWatch agent is not running")
    (tmp_path / "b").mkdir()
    r, calls = _step25(tmp_path / "b", "worker", CLOUDWATCH_SKIP="no CloudWatch here")
    assert r.returncode == 0 and calls == [] and "SKIPPED: CloudWatch logs (no CloudWatch here)" in r.stdout
    (tmp_path / "c").mkdir()
    r, calls = _step25(tmp_path / "c", "worker", LOGS_ENABLED="0")
    assert r.returncode == 0 and calls == [] and "logs.enabled is false" in r.stdout
    (tmp_path / "d").mkdir()
    r, _ = _step25(tmp_path / "d", "worker", CLOUDWATCH_AGENT_CTL="/nonexistent/ctl")
    assert r.returncode == 1 and "step 20 installs the CloudWatch agent" in (tmp_path / "d" / "reason").read_text()


# --- the controller's metrics tick (lib/metrics.sh) ----------------------------------------

FAKE_PY = """#!/usr/bin/env bash
n=$(cat "$STUB_DIR/calls" 2>/dev/null || echo 0); echo $((n + 1)) >"$STUB_DIR/calls"
case ${STUB_OUTCOMES:-ok} in
  ok) exit 0 ;;
  denied) echo "metrics: GpuCluster/dev: cloudwatch:PutMetricData: access denied (AccessDenied)" >&2; exit 1 ;;
  flip) if ((n == 1)); then exit 0; fi; echo "metrics: boom" >&2; exit 1 ;;
esac
"""


def _ticks(tmp_path: Path, env: str, ticks: int = 3, interval: int = 0) -> tuple[list[str], int]:
    py = tmp_path / "aws-python"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    script = f"""
set -euo pipefail
export GPU_CLUSTER_STATE={tmp_path} GC_STEP=munge-responder STUB_DIR={tmp_path}
. {COMMON}
. {LIB / "metrics.sh"}
LOGS_ENABLED=1 METRICS_INTERVAL={interval} METRICS_NAMESPACE=GpuCluster/dev GPU_CLUSTER_AWS_PYTHON={py}
CLUSTER_METRICS_PROGRAM=/opt/gpu-cluster/lib/cluster_metrics.py
{env}
for _ in $(seq {ticks}); do metrics_tick; done
"""
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    calls = tmp_path / "calls"
    return [line.split("] ", 1)[1] for line in (r.stdout + r.stderr).splitlines()], int(
        calls.read_text() if calls.exists() else 0
    )


def test_metrics_publish_quietly_and_say_a_failure_once_per_change(tmp_path):
    for d in ("ok", "denied", "flip"):
        (tmp_path / d).mkdir()
    assert _ticks(tmp_path / "ok", "") == ([], 3)
    lines, calls = _ticks(tmp_path / "denied", "export STUB_OUTCOMES=denied")
    assert calls == 3
    assert lines == ["WARNING: metrics: GpuCluster/dev: cloudwatch:PutMetricData: access denied (AccessDenied)"]
    lines, _ = _ticks(tmp_path / "flip", "export STUB_OUTCOMES=flip", ticks=3)  # fails, works, fails
    assert lines == ["WARNING: metrics: boom", "metrics: published to GpuCluster/dev again", "WARNING: metrics: boom"]


def test_metrics_once_per_interval_and_not_at_all_without_logs_or_in_a_lane(tmp_path):
    for d in ("interval", "off", "lane"):
        (tmp_path / d).mkdir()
    assert _ticks(tmp_path / "interval", "", interval=3600)[1] == 1
    assert _ticks(tmp_path / "off", "LOGS_ENABLED=0") == ([], 0)
    lines, calls = _ticks(tmp_path / "lane", "CLOUDWATCH_SKIP='no CloudWatch here'")
    assert (lines, calls) == (["metrics: not published to CloudWatch (no CloudWatch here)"], 0)
