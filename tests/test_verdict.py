"""The verdict engine on real logs (tests/data/verdict/SOURCES.md says where each is from)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nodeside import verdict

DATA = Path(__file__).parent / "data" / "verdict"
P5 = verdict.thresholds(3200, 8, 32)


def run(name, **kw):
    return verdict.evaluate((DATA / name).read_text(), name=name, **kw)


def reasons(r):
    return " | ".join(r["reasons"])


# --- thresholds ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "efa_gbps,gpus,nics,ar,a2a",
    [
        (3200, 8, 32, 240.0, 60.0),  # p5/p5e: 400 GB/s per node, 50 GB/s per GPU
        (3200, 8, 8, 240.0, 60.0),  # p6-b200: same bandwidth over 8 NICs
        (400, 8, 4, 30.0, 7.5),  # p4d/p4de: 50 GB/s per node
    ],
)
def test_thresholds_per_instance(efa_gbps, gpus, nics, ar, a2a):
    t = verdict.thresholds(efa_gbps, gpus, nics)
    assert (t["all_reduce_min_algbw"], t["alltoall_min_algbw"]) == (ar, a2a)
    assert t["expect_nics"] == nics and t["expect_transport"] == "efa"
    assert t["pingpong_max_latency_us"] == 30.0


def test_thresholds_separate_seed_reference_from_seed_failure_modes():
    # reference run (P6-B200): 374 GB/s all-reduce, 95 GB/s all-to-all at 16 GiB
    # passes; its one-CPU-per-rank figures (92 / 8.7 GB/s) fail
    t = verdict.thresholds(3200, 8, 8)
    assert 92 < t["all_reduce_min_algbw"] < 374
    assert 8.7 < t["alltoall_min_algbw"] < 95


@pytest.mark.parametrize(
    "op,n,factor",
    [
        ("all_reduce", 16, 2 * 15 / 16),
        ("alltoall", 16, 15 / 16),
        ("all_reduce", 2, 1.0),
        ("alltoall", 1, 0.0),
    ],
)
def test_busbw_factor_is_nccl_tests_formula(op, n, factor):
    assert verdict.busbw_factor(op, n) == pytest.approx(factor)


# --- nccl-tests: GO ------------------------------------------------------------------


def test_efa_p5_16g_is_go_with_p5_thresholds():
    r = run("efa_p5_allreduce_16g.log", expect_transport="efa", expect_nics=32, min_algbw=P5["all_reduce_min_algbw"])
    assert r["verdict"] == "GO", reasons(r)
    assert (r["transport"], r["nics"], r["wrong"]) == ("efa", 32, 0)
    assert (r["max_size_bytes"], r["algbw"], r["busbw"]) == (17179869184, 259.78, 487.09)
    assert r["requested_max_bytes"] == 17179869184


def test_no_transport_line_rests_on_bandwidth_alone():
    r = run("gcp_h100_allreduce_8g.log", expect_transport="efa")
    assert r["verdict"] == "GO"
    assert r["transport"] is None and r["nodes"] == 2
    assert "verdict rests on bandwidth alone" in r["notes"][0]
    assert (r["max_size_bytes"], r["algbw"]) == (8589934592, 180.71)


def test_newer_footer_and_widened_columns_parse():
    r = run("footer_concluded_rccl2078.log")
    assert r["verdict"] == "GO" and r["collective"] == "all_reduce"
    assert (r["max_size_bytes"], r["algbw"], r["busbw"]) == (17179869184, 192.52, 360.98)


def test_old_error_column_alltoall_in_place_is_not_a_wrong_value():
    # old nccl-tests printed 1e+00 for in-place all-to-all while "Out of bounds : 0 OK"
    r = run("alltoall_old_inplace_issue78.log")
    assert r["verdict"] == "GO", reasons(r)
    assert (r["collective"], r["wrong"], r["algbw"]) == ("alltoall", 0, 0.52)


def test_na_in_place_alltoall_and_bytes_step_header():
    r = run("alltoall_na_inplace_issue287.log")
    assert r["verdict"] == "GO", reasons(r)
    assert r["max_size_bytes"] == r["requested_max_bytes"] == 33554432
    assert r["busbw"] == 0.0


# --- nccl-tests: NO-GO, one rule each -------------------------------------------------


def test_socket_fallback_in_multi_node_run_is_nogo():
    r = run("socket_2node_timeout_issue284.log")
    assert r["verdict"] == "NO-GO" and r["transport"] == "socket" and r["nodes"] == 2
    assert "NCCL fell back to TCP sockets ('Using network Socket')" in r["reasons"]


def test_socket_on_a_single_node_is_not_a_fallback():
    # one host (Meowth): sockets are never used for data, so not a reason;
    # the NCCL WARN and the missing summary still are
    r = run("socket_single_node_issue131.log")
    assert r["nodes"] == 1 and r["transport"] == "socket"
    assert not any("Socket" in x for x in r["reasons"])
    assert any(x.startswith("1 NCCL WARN line(s), first: Could not find a path") for x in r["reasons"])


def test_ofi_over_tcp_is_not_efa():
    r = run("ofi_tcp_provider_issue229.log", expect_transport="efa")
    assert r["transport"] == "ofi-tcp;ofi_rxm"
    assert "transport ofi-tcp;ofi_rxm, expected efa" in r["reasons"]


def test_ib_when_efa_expected_and_warn_and_test_failure():
    r = run("warn_failure_ib_issue294.log", expect_transport="efa")
    assert r["transport"] == "ib" and r["verdict"] == "NO-GO"
    assert "transport ib, expected efa" in r["reasons"]
    assert any(x.startswith("1 NCCL WARN line(s), first: Net : connecting") for x in r["reasons"])
    assert "run failed: Test NCCL failure common.cu:1057 'internal error / '" in r["reasons"]


def test_ib_expected_accepts_ib_transport():
    r = run("warn_failure_ib_issue294.log", expect_transport="ib")
    assert not any("expected" in x for x in r["reasons"])


def test_fewer_nics_than_expected():
    r = run("efa_p5_allreduce_16g.log", expect_transport="efa", expect_nics=33)
    assert r["reasons"] == ["NCCL found 32 nics, expected 33"]


def test_out_of_bounds_failed_and_old_error_column():
    r = run("oob_failed_allgather_issue37.log")
    assert r["verdict"] == "NO-GO" and r["wrong"] == 2
    assert "Out of bounds values : 2 FAILED" in r["reasons"]
    assert r["collective"] == "all_gather" and r["algbw"] == 129.05


def test_wrong_counts_without_failed_summary():
    # the #wrong column alone must fail a run, even if a summary line was lost
    text = (DATA / "gcp_h100_allreduce_8g.log").read_text().replace("338.82      0    47743", "338.82      3    47743")
    r = verdict.evaluate(text)
    assert r["wrong"] == 3 and "3 wrong value(s) in the #wrong/error column" in r["reasons"]


def test_correctness_check_off_in_header_and_test_failure():
    r = run("check_off_failure_issue219.log")
    assert "correctness check switched off (-c 0 / validation: 0)" in r["reasons"]
    assert any(x.startswith("run failed: Test NCCL failure common.cu:959") for x in r["reasons"])
    assert "no result rows: the test never produced a measurement" in r["reasons"]


def test_correctness_check_off_seen_from_na_column():
    r = run("check_off_na_broadcast_issue82.log")
    assert "correctness check switched off (#wrong column is N/A)" in r["reasons"]


def test_never_reached_summary():
    r = run("efa_p5_allreduce_readme_excerpt.log")
    assert r["reasons"] == ["never reached the summary lines (Out of bounds / Avg bus bandwidth)"]
    assert r["algbw"] == 259.78  # the srun --label "0: " prefix is stripped


def test_stopped_before_largest_requested_size():
    r = run("efa_p5_allreduce_truncated.log")
    assert "stopped at 1073741824 bytes, before the requested largest size 17179869184" in r["reasons"]
    assert r["max_size_bytes"] == 1073741824


def test_version_header_and_cut_row():
    r = run("version_header_spark_pr103.log")
    assert r["collective"] == "all_reduce" and r["nodes"] == 2
    assert r["max_size_bytes"] == 65536  # the cut "131072" row is not a measurement
    assert "stopped at 65536 bytes, before the requested largest size 8589934592" in r["reasons"]


def test_indented_prefixed_rows_and_half_printed_last_row():
    # 4-space indent + "0: " + a last row cut before its #wrong field: that row
    # must not be read with shifted columns (algbw 66132 would be nonsense)
    r = run("efa_p5_allreduce_workshop_excerpt.log")
    assert (r["max_size_bytes"], r["algbw"], r["wrong"], r["nics"]) == (8589934592, 255.62, 0, 32)


def test_mpirun_tag_output_prefix():
    r = run("alltoall_efa_bottlerocket313.log")
    assert (r["max_size_bytes"], r["algbw"], r["busbw"]) == (524288, 2.46, 2.31)
    assert r["wrong"] == 0


@pytest.mark.parametrize(
    "kw,expected",
    [
        ({"min_algbw": 240.0}, "algbw 180.71 GB/s at 8589934592 bytes below 240.0 GB/s"),
        ({"min_busbw": 400.0}, "busbw 338.82 GB/s at 8589934592 bytes below 400.0 GB/s"),
    ],
)
def test_bandwidth_below_threshold(kw, expected):
    assert run("gcp_h100_allreduce_8g.log", **kw)["reasons"] == [expected]


# --- PyTorch measurement (our own format) --------------------------------------------


def test_torch_reference_figures_go():
    r = run("torch_allreduce_seed_reference.log", expect_transport="efa", expect_nics=8, min_algbw=240.0)
    assert r["verdict"] == "GO", reasons(r)
    assert (r["tool"], r["collective"], r["algbw"], r["busbw"]) == ("torch_comm_bench", "all_reduce", 367.5, 689.1)


def test_torch_one_cpu_per_rank_figure_nogo():
    r = run("torch_alltoall_one_cpu.log", expect_transport="efa", min_algbw=60.0)
    assert r["reasons"] == ["algbw 8.7 GB/s at 8589934592 bytes below 60.0 GB/s"]


def test_torch_crash_nogo():
    r = run("torch_allreduce_crashed.log")
    assert r["tool"] == "torch_comm_bench"
    assert "no result rows: the measurement never produced a figure" in r["reasons"]
    assert "never reached the summary line (# torch_comm_bench done)" in r["reasons"]
    assert any(x.startswith("run failed: Traceback") for x in r["reasons"])


# --- fi_pingpong ---------------------------------------------------------------------


def test_pingpong_latency_parsed_and_judged():
    r = run("fi_pingpong_client_magic_castle331.log", max_latency_us=30.0, expect_transport="efa")
    assert (r["tool"], r["transport"], r["latency_us"], r["latency_size_bytes"]) == ("fi_pingpong", "efa", 2059.35, 64)
    assert r["max_size_bytes"] == 65536
    assert r["reasons"] == ["latency 2059.35 us at 64 B above 30.0 us"]


def test_pingpong_without_results_nogo():
    r = run("fi_pingpong_server_hang_issue11256.log")
    assert r["reasons"] == ["no result rows: the client never completed a ping-pong"]


# --- command line --------------------------------------------------------------------


def test_cli_json_lines_and_exit_status():
    cmd = [sys.executable, "-m", "nodeside.verdict", "--expect-transport", "efa", "--json"]
    good = subprocess.run(cmd + [str(DATA / "efa_p5_allreduce_16g.log")], capture_output=True, text=True)
    assert good.returncode == 0
    obj = json.loads(good.stdout)
    assert set(obj) >= {
        "file",
        "tool",
        "verdict",
        "transport",
        "nics",
        "max_size_bytes",
        "busbw",
        "algbw",
        "wrong",
        "reasons",
    }
    both = subprocess.run(
        cmd + [str(DATA / "efa_p5_allreduce_16g.log"), str(DATA / "socket_2node_timeout_issue284.log")],
        capture_output=True,
        text=True,
    )
    assert both.returncode == 1
    assert [json.loads(x)["verdict"] for x in both.stdout.splitlines()] == ["GO", "NO-GO"]


def test_cli_unreadable_log_is_nogo(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "nodeside.verdict", "--json", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert out.returncode == 1
    assert json.loads(out.stdout)["reasons"][0].startswith("cannot read log:")


def test_failed_launch_marker_from_the_gate_is_nogo():
    # gate.sh appends this line when srun (or its timeout) exits non-zero
    text = (DATA / "efa_p5_allreduce_16g.log").read_text() + "gate: command exit status 124 (124: killed after 900s)\n"
    r = verdict.evaluate(text, expect_transport="efa")
    assert r["reasons"] == ["run failed: gate: command exit status 124 (124: killed after 900s)"]
