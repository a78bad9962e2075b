"""Smoke test of bench/bench_munge_join.py: 8 joiners through the real join path.

The benchmark runs the rendered responder and step 40's join functions; here it must
end with every joiner holding exactly the cluster's key (munge-owned, 0400), nothing
left on the shared directory, no plaintext key on it, and nothing it started still
running. No timing is asserted: the figures depend on the machine's load.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "bench_munge_join.py"

pytestmark = [
    pytest.mark.slurm,  # the joiners install the key as Debian's munge user does; needs root
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (tmpfs in a mount namespace, munge-owned keys)"),
    pytest.mark.skipif(shutil.which("mungekey") is None, reason="munge is not installed (apt-get install munge)"),
]

JOINERS = 8
PROFILED = 4


def _alive(pid: int, marker: str) -> bool:
    """pid still runs and is one of ours (pids can be reused by the time we look)."""
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False


def test_eight_joiners_get_the_key_through_the_real_responder(tmp_path):
    out = tmp_path / "result.json"
    before = set(Path("/var/tmp").glob(f"gpu-cluster-bench-munge-{JOINERS}-*"))
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--joiners",
            str(JOINERS),
            "--profile-requests",
            str(PROFILED),
            "--timeout",
            "120",
            "--key-cache",
            str(tmp_path / "keys"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [r] = json.loads(out.read_text())
    assert r["joiners"] == JOINERS
    assert (r["holding"], r["failed_count"]) == (JOINERS, 0), r.get("first_failed_log")
    assert f"holding the key: {JOINERS}/{JOINERS}" in proc.stdout
    # every joiner has a time, and the slowest bounds the rest
    assert r["per_joiner_p50_s"] <= r["per_joiner_p95_s"] <= r["per_joiner_max_s"] <= r["seconds_until_all_hold"] + 1
    assert isinstance(r["goal_met"], bool) and ("MET" in proc.stdout or "MISSED" in proc.stdout)
    # the responder did the answering, and each joiner cleaned up after itself
    assert r["responder_passes_answering"] >= 1
    assert r["responder_cpu_s"] > 0
    assert (r["requests_left"], r["responses_left"]) == (0, 0)
    assert r["plaintext_key_on_fsx"] == []
    # the profiled pass is the shipped mj_answer answering every request it was given
    for key in ("profile_as_shipped", "profile_without_ca_bundle"):
        assert r[key]["answered"] == PROFILED, r[key]
        assert any(k.startswith("openssl cms") for k in r[key]["ms_per_request_by_command"]), r[key]
    # the joiners' key pairs were made by the shipped mj_request into the cache we gave
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == [f"i-bench{i:05d}" for i in range(JOINERS)]
    # bounded cleanup: nothing it started still runs, its directory is gone
    assert len(r["started_pids"]) == JOINERS + 1
    assert not [p for p in r["started_pids"] if _alive(p, "GPU_CLUSTER_HOME=/var/tmp/gpu-cluster-bench-munge-")]
    assert set(Path("/var/tmp").glob(f"gpu-cluster-bench-munge-{JOINERS}-*")) == before
