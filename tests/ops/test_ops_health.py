"""`python3 -m ops health NODE --level N`: dcgmi diag on the node itself through SSM (stubbed)."""

from __future__ import annotations

import json
import subprocess

import pytest

from ops.cli import main
from ops.remote import DCGM_BUSY, DCGM_MISSING, dcgm_script
from tests.support.ops_stubs import Aws, FakeClock, context, ec2_instance, stub_ssm
from tests.support.status_stack import W1, stack_dir

BY_NAME = {
    "Filters": [
        {"Name": "tag:GpuClusterName", "Values": ["dev"]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
        {"Name": "private-ip-address", "Values": ["10.0.1.6"]},
    ]
}
TABLE = "| Deployment | Pass |\n| Memory | Pass |\n| Diagnostic | Pass |\n"


def run(tmp_path, level: int, stdout: str, status: str = "Success", code: int = 0, *extra: str):
    aws = Aws()
    aws.stub("ec2").add_response(
        "describe_instances", {"Reservations": [{"Instances": [ec2_instance(W1, "10.0.1.6", "block-a")]}]}, BY_NAME
    )
    timeout = {1: 300, 2: 1200, 3: 3600}[level]
    stub_ssm(aws, W1, dcgm_script(level, "--busy-ok" in extra), f"dcgmi diag -r {level}", timeout, stdout, status, code)
    ctx = context(aws, clock=FakeClock())
    argv = ["health", "ip-10-0-1-6", "--level", str(level), "--stack", "dev", "--stack-dir", str(stack_dir(tmp_path))]
    rc = main([*argv, *extra], ctx=ctx, session_for=aws.session)
    aws.done()
    return rc, ctx.out.getvalue()


def test_level2_pass_runs_on_the_node_not_the_controller(tmp_path):
    rc, out = run(tmp_path, 2, TABLE)
    assert rc == 0
    assert out.splitlines()[0] == f"dcgmi diag -r 2 on ip-10-0-1-6 ({W1}): pass"
    assert "| Memory | Pass |" in out


def test_level3_failure_points_at_replace(tmp_path):
    rc, out = run(tmp_path, 3, "| Memory | Fail - GPU 3 |\n", "Failed", 226, "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["verdict"] == "fail" and doc["exit_code"] == 226


def test_busy_node_is_refused_and_missing_dcgmi_is_not_a_pass(tmp_path):
    rc, out = run(tmp_path, 2, "jobs running on ip-10-0-1-6: 101 ", "Failed", DCGM_BUSY)
    assert rc == 1 and "refused (pass --busy-ok to run it anyway)" in out.splitlines()[0]
    rc, out = run(tmp_path, 1, "dcgmi is not installed on this node", "Failed", DCGM_MISSING, "--busy-ok")
    assert rc == 1 and out.splitlines()[0].endswith(": skipped")


@pytest.mark.parametrize(
    ("jobs", "dcgmi", "want"), [("101", True, DCGM_BUSY), ("", False, DCGM_MISSING), ("", True, 0)]
)
def test_script_under_sh_with_fake_tools(tmp_path, jobs, dcgmi, want):
    """The exact lines SSM runs, by /bin/sh, against a fake squeue and dcgmi."""
    (tmp_path / "squeue").write_text(f"#!/bin/sh\n[ -n '{jobs}' ] && echo {jobs}\nexit 0\n")
    (tmp_path / "squeue").chmod(0o755)
    if dcgmi:
        (tmp_path / "dcgmi").write_text(f"#!/bin/sh\necho \"dcgmi $*\"\nprintf '{TABLE}'\n")
        (tmp_path / "dcgmi").chmod(0o755)
    r = subprocess.run(
        ["/bin/sh", "-c", "\n".join(dcgm_script(2))],
        capture_output=True,
        text=True,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
        timeout=30,
    )
    assert r.returncode == want, r.stdout + r.stderr
    if want == 0:
        assert r.stdout.startswith("dcgmi diag -r 2")
