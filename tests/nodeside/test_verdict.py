"""The verdict engine on real logs (tests/data/verdict/SOURCES.md says where each is from)."""

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeside import verdict

DATA = Path(__file__).parents[1] / "data" / "verdict"
P5 = verdict.thresholds(3200, 8, 32)


def run(name, **kw):
    return verdict.evaluate((DATA / name).read_text(), name=name, **kw)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "nodeside.verdict", *args], capture_output=True, text=True)


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
    # the thread starts fi_pingpong twice (the first one interrupted): two runs, both empty
    r = run("fi_pingpong_server_hang_issue11256.log")
    assert r["reasons"] == [
        "fi_pingpong #1 (lines 1-2): no result rows: the client never completed a ping-pong",
        "fi_pingpong #2 (lines 3-22): no result rows: the client never completed a ping-pong",
    ]


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


@pytest.mark.parametrize(
    "make, code, why",
    [
        (lambda d: d / "nope", 3, "cannot read log: No such file or directory"),
        (lambda d: d, 2, "not a log file: a directory"),
        (lambda d: Path("/dev/zero"), 2, "not a log file: not a regular file (a device, FIFO or socket)"),
    ],
)
def test_cli_unreadable_log_or_not_a_file(tmp_path, make, code, why):
    # a missing file cannot be read (3); a directory or a device is bad input (2), refused
    # before it is read (/dev/zero would be read without end); neither is a measurement
    out = cli("--json", str(make(tmp_path)))
    assert out.returncode == code
    obj = json.loads(out.stdout)
    assert obj["verdict"] == "NO-GO" and obj["reasons"] == [why]


def test_cli_unreadable_wins_over_nogo_and_go(tmp_path):
    out = cli(
        "--json",
        str(DATA / "efa_p5_allreduce_16g.log"),
        str(DATA / "socket_2node_timeout_issue284.log"),
        str(tmp_path / "nope"),
    )
    assert out.returncode == 3
    assert [json.loads(x)["verdict"] for x in out.stdout.splitlines()] == ["GO", "NO-GO", "NO-GO"]


def test_cli_undecodable_bytes_are_replaced_not_unreadable(tmp_path):
    log = tmp_path / "latin1.log"
    log.write_bytes((DATA / "efa_p5_allreduce_16g.log").read_bytes() + b"caf\xe9 \xff\xfe\n")
    out = cli("--json", str(log))
    assert out.returncode == 0, out.stdout
    assert json.loads(out.stdout)["verdict"] == "GO"


def test_failed_launch_marker_from_the_gate_is_nogo():
    # gate.sh appends this line when srun (or its timeout) exits non-zero
    text = (DATA / "efa_p5_allreduce_16g.log").read_text() + "gate: command exit status 124 (124: killed after 900s)\n"
    r = verdict.evaluate(text, expect_transport="efa")
    assert r["reasons"] == ["run failed: gate: command exit status 124 (124: killed after 900s)"]


# --- launcher prefixes ---------------------------------------------------------------


def _unlabelled(name):
    # the p5 log as rank 0 printed it, without its "0: " srun label
    return [ln[3:] for ln in (DATA / name).read_text().splitlines()]


@pytest.mark.parametrize(
    "prefix",
    [
        "0: ",  # srun -l
        " 0: ",  # srun --label, padded to the widest task id
        "12: ",
        "[1,0]<stdout>:",  # mpirun --tag-output
        "[1,0]<stderr>: ",
        "[rank 0] ",
        "[rank0]: ",  # PyTorch's per-rank prefix
        "    0: ",  # quoted in markdown, then labelled
        " 3: [1,3]<stdout>:",  # srun -l around mpirun --tag-output
    ],
)
def test_launcher_prefixes_are_stripped_everywhere(prefix):
    text = "\n".join(prefix + ln for ln in _unlabelled("efa_p5_allreduce_16g.log"))
    r = verdict.evaluate(text, expect_transport="efa", expect_nics=32, min_algbw=240.0)
    assert r["verdict"] == "GO", reasons(r)
    assert (r["transport"], r["nics"], r["max_size_bytes"], r["algbw"]) == ("efa", 32, 17179869184, 259.78)
    assert r["requested_max_bytes"] == 17179869184


def test_rank_prefix_on_ncclhost_lines_keeps_hosts_and_transport():
    text = "\n".join(
        f"[rank {i % 2}] {ln}"
        for i, ln in enumerate((DATA / "socket_2node_timeout_issue284.log").read_text().splitlines())
    )
    r = verdict.evaluate(text)
    assert (r["nodes"], r["transport"]) == (2, "socket")
    assert verdict.SOCKET_REASON in r["reasons"]


@pytest.mark.parametrize(
    "line",
    [
        "           8             2     float     sum      -1    69.12    0.00    0.00      0    72.43    0.00    0.00      0",
        "   8    2   float  sum   -1  1.0  0.00  0.00  0  1.0  0.00  0.00  0",
        "12345:12345:12346 [0] NCCL INFO Using network Socket",
        "10:31:07 elapsed",
        "[1,0] is not a tag",
        "[ranking] 3 items",
    ],
)
def test_prefix_stripping_leaves_content_alone(line):
    assert verdict._strip(line) == line.strip()


def test_padded_srun_labels_real_shape_is_go():
    r = run("synthetic_srun_label_padded.log", instance_type="p5.48xlarge")
    assert r["verdict"] == "GO", reasons(r)
    assert (r["transport"], r["nics"], r["algbw"]) == ("efa", 32, 259.78)


# --- several runs in one log ---------------------------------------------------------


def _joined(*names):
    return "".join((DATA / n).read_text() for n in names)


def test_complete_then_truncated_run_is_nogo_and_both_are_named():
    r = verdict.evaluate(_joined("efa_p5_allreduce_16g.log", "efa_p5_allreduce_truncated.log"), expect_transport="efa")
    assert r["verdict"] == "NO-GO"
    assert [(x["run"], x["verdict"]) for x in r["runs"]] == [
        ("nccl-tests #1 (lines 1-39)", "GO"),
        ("nccl-tests #2 (lines 40-72)", "NO-GO"),
    ]
    assert (
        "nccl-tests #2 (lines 40-72): stopped at 1073741824 bytes, before the requested largest size 17179869184"
        in r["reasons"]
    )
    # the top-level figures are the deciding run's
    assert (r["run"], r["max_size_bytes"]) == ("nccl-tests #2 (lines 40-72)", 1073741824)


def test_truncated_then_complete_run_is_nogo():
    r = verdict.evaluate(_joined("efa_p5_allreduce_truncated.log", "efa_p5_allreduce_16g.log"))
    assert [x["verdict"] for x in r["runs"]] == ["NO-GO", "GO"] and r["verdict"] == "NO-GO"


def test_several_tools_in_one_log_are_all_judged():
    text = _joined("efa_p5_allreduce_16g.log", "torch_alltoall_one_cpu.log", "fi_pingpong_client_magic_castle331.log")
    r = verdict.evaluate(text, expect_transport="efa", max_latency_us=30.0)
    assert [(x["run"], x["verdict"]) for x in r["runs"]] == [
        ("nccl-tests #1 (lines 1-39)", "GO"),
        ("torch_comm_bench #1 (lines 40-45)", "GO"),
        ("fi_pingpong #1 (lines 46-52)", "NO-GO"),
    ]
    assert r["reasons"] == ["fi_pingpong #1 (lines 46-52): latency 2059.35 us at 64 B above 30.0 us"]
    assert r["tool"] == "fi_pingpong"


def test_every_run_of_every_tool_gets_an_ordinal():
    text = _joined("torch_allreduce_seed_reference.log", "torch_alltoall_one_cpu.log", "efa_p5_allreduce_16g.log")
    r = verdict.evaluate(text, min_algbw=60.0)
    assert [x["run"] for x in r["runs"]] == [
        "torch_comm_bench #1 (lines 1-8)",
        "torch_comm_bench #2 (lines 9-14)",
        "nccl-tests #1 (lines 15-53)",
    ]
    assert r["reasons"] == ["torch_comm_bench #2 (lines 9-14): algbw 8.7 GB/s at 8589934592 bytes below 60.0 GB/s"]


def test_a_launch_that_printed_nothing_after_a_good_run_is_nogo():
    text = (
        _joined("efa_p5_allreduce_16g.log")
        + "$ srun ./build/alltoall_perf -b 8 -e 16G\nsrun: error: gpu-b: task 9: Killed\n"
    )
    r = verdict.evaluate(text)
    assert [(x["run"], x["verdict"]) for x in r["runs"]] == [
        ("nccl-tests #1 (lines 1-39)", "GO"),
        ("nccl-tests #2 (lines 40-41)", "NO-GO"),
    ]


def test_one_run_keeps_plain_reasons_and_is_named():
    r = run("efa_p5_allreduce_truncated.log")
    assert r["run"] == "nccl-tests #1 (lines 1-33)" and r["lines"] == [1, 33]
    assert [x["run"] for x in r["runs"]] == ["nccl-tests #1 (lines 1-33)"]
    assert r["reasons"] == [
        "never reached the summary lines (Out of bounds / Avg bus bandwidth)",
        "stopped at 1073741824 bytes, before the requested largest size 17179869184",
    ]


# --- processes that ran alone ----------------------------------------------------------


@pytest.mark.parametrize(
    "name,procs,hosts",
    [
        ("alone_nompi_two_nodes_issue107.log", 2, 2),  # headers interleaved, "Rank 0" twice
        ("alone_rank0_x16_issue254.log", 12, 2),  # sixteen processes, every one "Rank 0" (quote cut at 12)
        ("synthetic_alone_srun_labels.log", 2, 2),  # complete tables, one per process
    ],
)
def test_processes_that_ran_alone_are_nogo(name, procs, hosts):
    r = run(name)
    assert r["verdict"] == "NO-GO"
    want = f"{verdict.ALONE_REASON} ({procs} processes, each its own communicator, on {hosts} host(s))"
    assert all(want in x["reasons"] for x in r["runs"]), reasons(r)


def test_alone_even_when_every_figure_is_fine():
    r = run("synthetic_alone_srun_labels.log")
    assert all(x["reasons"][0].startswith(verdict.ALONE_REASON) and len(x["reasons"]) == 1 for x in r["runs"])


def test_alone_seen_from_nccl_init_lines():
    # NCCL_DEBUG=INFO: every process initialised a communicator of one rank
    init = "gpu-{h}:{p}:{p} [0] NCCL INFO comm 0x5555 rank 0 nranks 1 cudaDev 0 busId 53000 - Init COMPLETE"
    lines = _unlabelled("efa_p5_allreduce_16g.log")
    text = "\n".join(lines[:1] + [init.format(h=h, p=p) for h, p in (("a", 11), ("b", 12))] + lines[1:])
    r = verdict.evaluate(text)
    assert r["reasons"][0].startswith(verdict.ALONE_REASON)


@pytest.mark.parametrize(
    "name",
    [
        "gcp_h100_allreduce_8g.log",
        "socket_single_node_issue131.log",
        "version_header_spark_pr103.log",
        "check_off_failure_issue219.log",
    ],
)
def test_one_communicator_is_not_alone(name):
    # MPI runs (ranks over several processes) and one process driving several GPUs
    assert not any(x.startswith(verdict.ALONE_REASON) for x in run(name)["reasons"])


def test_nccl_init_lines_of_a_real_communicator_are_not_alone():
    init = "gpu-{h}:{p}:{p} [0] NCCL INFO comm 0x5555 rank {r} nranks 2 cudaDev 0 busId 53000 - Init COMPLETE"
    lines = _unlabelled("efa_p5_allreduce_16g.log")
    text = "\n".join(
        lines[:1] + [init.format(h=h, p=p, r=r) for r, (h, p) in enumerate((("a", 11), ("b", 12)))] + lines[1:]
    )
    assert verdict.evaluate(text)["verdict"] == "GO"


# --- socket when the network is expected ------------------------------------------------


@pytest.mark.parametrize("expect", ["efa", "ib"])
def test_socket_is_nogo_when_network_expected_even_on_one_node(expect):
    r = run("socket_single_node_issue131.log", expect_transport=expect)
    assert r["nodes"] == 1 and verdict.SOCKET_REASON in r["reasons"]


def test_socket_is_nogo_when_no_host_is_recognised():
    # a GO table plus a socket line whose host prefix was lost
    lines = _unlabelled("efa_p5_allreduce_16g.log")
    text = "\n".join([lines[0], "NCCL INFO Using network Socket", *lines[3:]])
    r = verdict.evaluate(text, expect_transport="efa")
    assert r["nodes"] is None and r["reasons"] == [verdict.SOCKET_REASON]


def test_socket_channel_lines_count_as_the_socket_transport():
    lines = _unlabelled("efa_p5_allreduce_16g.log")
    chan = "gpu-a:11:40 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0"
    text = "\n".join([lines[0], chan, *lines[3:]])
    r = verdict.evaluate(text, instance_type="p5.48xlarge")
    assert r["transport"] == "socket" and verdict.SOCKET_REASON in r["reasons"]


def test_socket_plugin_interface_listing_is_not_the_transport():
    # "NET/Socket : Using [0]eth0" is printed while aws-ofi-nccl carries the data (NCCL-229)
    r = run("ofi_tcp_provider_issue229.log")
    assert r["transport"] == "ofi-tcp;ofi_rxm" and verdict.SOCKET_REASON not in r["reasons"]


# --- thresholds and instance types ---------------------------------------------------------


@pytest.mark.parametrize("flag", ["--min-algbw", "--min-busbw", "--max-latency-us", "--expect-nics"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "abc"])
def test_cli_refuses_thresholds_that_are_not_finite_and_positive(flag, value):
    out = cli(f"{flag}={value}", str(DATA / "efa_p5_allreduce_16g.log"))
    assert out.returncode == 2 and out.stdout == ""
    assert f"error: argument {flag}: '{value}' is not a" in out.stderr


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.0, -1.0])
def test_evaluate_refuses_thresholds_that_are_not_finite_and_positive(value):
    with pytest.raises(ValueError, match="min_algbw must be a finite positive number"):
        verdict.evaluate("", min_algbw=value)


def test_instance_type_table_is_the_catalog():
    from model.catalog import CATALOG

    want = {n: (s.efa_gbps, s.gpus, s.efa_count) for n, s in CATALOG.items()}
    assert want == verdict.INSTANCE_TYPES


def test_checkout_instance_table_is_the_shipped_one(update_golden):
    # nodeside/instance_types.json serves runs from a checkout; the nodes get the same
    # bytes rendered from model/catalog.py (--update-golden rewrites the checkout copy)
    from userdata.validation_files import instance_types_json

    path = Path(verdict.__file__).with_name(verdict.INSTANCE_TYPES_FILE)
    if update_golden:
        path.write_text(instance_types_json())
    assert path.read_text() == instance_types_json()


def test_shipped_copy_reads_the_catalog_data_and_imports_nothing_of_ours(tmp_path):
    from model.catalog import CATALOG
    from tests.support.fake_slurm import ctx
    from tests.support.shipped_verdict import shipped_namespace
    from userdata.validation_files import validation_files

    files = validation_files(ctx())
    shipped = files["/opt/gpu-cluster/lib/verdict.py"]
    import ast

    imported = set()
    for node in ast.walk(ast.parse(shipped)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    ours = {"model", "userdata", "infra", "offline", "stackfile", "nodeside", "localcluster", "ops", "clitools"}
    assert not imported & ours and "CATALOG" not in shipped
    ns = shipped_namespace(files, tmp_path)
    assert ns["INSTANCE_TYPES"] == {n: (s.efa_gbps, s.gpus, s.efa_count) for n, s in CATALOG.items()}
    text = (DATA / "gcp_h100_allreduce_8g.log").read_text()
    assert ns["evaluate"](text, instance_type="p5.48xlarge") == verdict.evaluate(text, instance_type="p5.48xlarge")


@pytest.mark.parametrize(
    "name,itype,expected",
    [
        ("gcp_h100_allreduce_8g.log", "p5.48xlarge", ["algbw 180.71 GB/s at 8589934592 bytes below 240.0 GB/s"]),
        ("gcp_h100_allreduce_8g.log", "p4d.24xlarge", []),
        ("efa_p5_allreduce_16g.log", "p5.48xlarge", []),
        ("efa_p5_allreduce_16g.log", "p5en.48xlarge", []),
        ("torch_alltoall_one_cpu.log", "p6-b200.48xlarge", ["algbw 8.7 GB/s at 8589934592 bytes below 60.0 GB/s"]),
        ("fi_pingpong_client_magic_castle331.log", "p5.48xlarge", ["latency 2059.35 us at 64 B above 30.0 us"]),
        ("warn_failure_ib_issue294.log", "p5.48xlarge", "transport ib, expected efa"),
    ],
)
def test_instance_type_applies_catalog_floors(name, itype, expected):
    r = run(name, instance_type=itype)
    if isinstance(expected, str):
        assert expected in r["reasons"]
    else:
        assert r["reasons"] == expected


def test_instance_type_nic_count():
    # p5 has 32 EFA devices: a log that found 8 is short of NICs
    text = (DATA / "torch_allreduce_seed_reference.log").read_text()
    assert "NCCL found 8 nics, expected 32" in verdict.evaluate(text, instance_type="p5.48xlarge")["reasons"]
    assert verdict.evaluate(text, instance_type="p6-b200.48xlarge")["verdict"] == "GO"


def test_explicit_floor_overrides_the_instance_type():
    r = run("gcp_h100_allreduce_8g.log", instance_type="p5.48xlarge", min_algbw=100.0)
    assert r["verdict"] == "GO", reasons(r)
    r = run("warn_failure_ib_issue294.log", instance_type="p5.48xlarge", expect_transport="any")
    assert not any("expected" in x for x in r["reasons"])


def test_instance_type_expects_the_efa_provider_of_fi_pingpong():
    text = (DATA / "fi_pingpong_client_magic_castle331.log").read_text().replace("-p efa", "-p tcp")
    assert "provider tcp, expected efa" in verdict.evaluate(text, instance_type="p5.48xlarge")["reasons"]


def test_cli_instance_type():
    out = cli("--instance-type", "p5.48xlarge", "--json", str(DATA / "gcp_h100_allreduce_8g.log"))
    assert out.returncode == 1
    assert json.loads(out.stdout)["reasons"] == ["algbw 180.71 GB/s at 8589934592 bytes below 240.0 GB/s"]
    bad = cli("--instance-type", "p9.huge", str(DATA / "gcp_h100_allreduce_8g.log"))
    assert bad.returncode == 2 and "invalid choice: 'p9.huge'" in bad.stderr


def test_cli_prints_human_lines_by_default_file_verdict_and_figures_against_floors():
    out = cli(str(DATA / "fi_pingpong_server_hang_issue11256.log"))
    assert out.returncode == 1 and out.stderr == ""
    path = DATA / "fi_pingpong_server_hang_issue11256.log"
    assert out.stdout.splitlines()[:3] == [
        f"{path}: NO-GO",
        "  NO-GO: fi_pingpong #1 (lines 1-2): transport efa",
        "  NO-GO: fi_pingpong #2 (lines 3-22): transport efa",
    ]
    out = cli("--instance-type", "p5.48xlarge", str(DATA / "gcp_h100_allreduce_8g.log"))
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        f"{DATA / 'gcp_h100_allreduce_8g.log'}: NO-GO",
        "  NO-GO: nccl-tests #1 (lines 1-64) all_reduce: 8589934592 B, algbw 180.71 GB/s (floor 240), busbw 338.82 GB/s",
        "  NO-GO: algbw 180.71 GB/s at 8589934592 bytes below 240.0 GB/s",
        "  note: no transport line in the log: verdict rests on bandwidth alone",
    ]
    out = cli("--instance-type", "p5.48xlarge", str(DATA / "efa_p5_allreduce_16g.log"))
    assert out.returncode == 0
    assert out.stdout.splitlines()[1] == (
        "  GO: nccl-tests #1 (lines 1-39): 17179869184 B, algbw 259.78 GB/s, busbw 487.09 GB/s, "
        "transport efa (expected efa), nics 32 (expected 32)"
    )


def test_cli_version_and_internal_error_line(tmp_path, monkeypatch, capsys):
    out = cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("verdict.py (gpu-cluster) ")
    monkeypatch.delenv(verdict.DEBUG_ENV, raising=False)

    def broken(*a, **kw):
        raise KeyError("a bug")

    monkeypatch.setattr(verdict, "evaluate", broken)
    assert verdict.main([str(DATA / "efa_p5_allreduce_16g.log")]) == 4
    assert capsys.readouterr().err == (
        f"verdict.py: internal error: KeyError: 'a bug'; rerun with {verdict.DEBUG_ENV}=1 for the traceback\n"
    )


# --- linear parsing -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "a" * 1_000_000,
        "fi_" * 340_000,
        "0: " * 330_000,
        " " * 1_000_000 + "x",
        "9" * 1_000_000,
        "x:1:1 [0] NCCL " * 60_000,
        "fi_pingpong " * 80_000,
        "Rank 0 Pid 1 on " * 60_000,
        "64 10 =10 " + "1" * 1_000_000,
        "No such" * 140_000,
        "8 2 float " + "1.0 " * 250_000,
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) " + "0: " * 300_000,
    ],
    ids=[
        "word",
        "fi_",
        "labels",
        "spaces",
        "digits",
        "ncclhost",
        "pingpong",
        "rank",
        "pprow",
        "nosuch",
        "row",
        "header",
    ],
)
def test_a_megabyte_line_is_parsed_quickly(line):
    # generous guard against catastrophic backtracking; bench/bench_verdict.py has the figures
    start = time.perf_counter()
    verdict.evaluate(line + "\n" + (DATA / "efa_p5_allreduce_16g.log").read_text())
    assert time.perf_counter() - start < 5.0


def test_every_log_is_cited_in_sources():
    sources = (DATA / "SOURCES.md").read_text()
    missing = [p.name for p in sorted(DATA.glob("*.log")) if f"`{p.name}`" not in sources]
    assert missing == []
    synthetic = [p.name for p in DATA.glob("synthetic_*.log")]
    assert all(f"`{n}` | **synthetic**" in sources for n in synthetic)


def _ranks_block(host, pid, gpus):
    return "\n".join(
        f"#  Rank {g:2d} Group  0 Pid {pid:6d} on {host:>9} device {g:2d} [0x53] NVIDIA H100 80GB HBM3"
        for g in range(gpus)
    )


def test_interleaved_one_process_communicators_on_two_hosts_ran_alone():
    # NVIDIA/nccl-tests#213: "-g 8" under mpirun without MPI, both headers first, then
    # each node's eight ranks from one process
    lines = _unlabelled("efa_p5_allreduce_16g.log")
    head = lines[0].replace("nGpus 1", "nGpus 8")
    text = "\n".join([head, "#", "# Using devices", head, "#", "# Using devices"])
    text += "\n" + _ranks_block("hw14", 798, 8) + "\n" + _ranks_block("hw15", 912, 8) + "\n" + "\n".join(lines[1:])
    r = verdict.evaluate(text)
    assert r["reasons"][0] == f"{verdict.ALONE_REASON} (2 processes, each its own communicator, on 2 host(s))"


def test_single_node_sweeps_one_after_the_other_did_not_run_alone():
    # one process driving 8 GPUs on each of two nodes, logs joined: two complete runs
    lines = _unlabelled("efa_p5_allreduce_16g.log")
    head = lines[0].replace("nGpus 1", "nGpus 8")
    one = lambda host, pid: "\n".join([head, "#", "# Using devices", _ranks_block(host, pid, 8), *lines[1:]])  # noqa: E731
    r = verdict.evaluate(one("gpu-a", 11) + "\n" + one("gpu-b", 12))
    assert r["verdict"] == "GO", reasons(r)
    assert len(r["runs"]) == 2


def test_run_as_a_script_from_a_checkout_finds_the_catalog(tmp_path):
    # `python3 nodeside/verdict.py`: nodeside/ is on sys.path, not the repository root
    script = Path(verdict.__file__)
    out = subprocess.run(
        [
            sys.executable,
            str(script),
            "--instance-type",
            "p5.48xlarge",
            "--json",
            str(DATA / "efa_p5_allreduce_16g.log"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["verdict"] == "GO"


# --- log shapes from the hardening review (tests/data/verdict/SOURCES.md) ------------------


def _judge_file(name, **kw):
    return verdict.evaluate((DATA / name).read_text(), **kw)


def test_a_single_node_run_is_no_proof_of_the_fabric_when_efa_is_expected():
    r = _judge_file("synthetic_single_node_efa_allreduce.log", expect_transport="efa")
    assert r["verdict"] == "NO-GO" and r["rank_nodes"] == 1 and r["transport"] == "efa"
    assert r["reasons"] == ["ran on one node: no efa traffic between nodes was measured; run it across two nodes"]
    # the same run judged without a network expectation (the gate's single-node step) passes
    assert _judge_file("synthetic_single_node_efa_allreduce.log", expect_transport="any")["verdict"] == "GO"
    # two hosts in the device list: not a single-node run
    assert _judge_file("gcp_h100_allreduce_8g.log", expect_transport="any")["rank_nodes"] == 2


def test_the_pytorch_all_reduce_benchmark_summary_is_read():
    r = _judge_file("torch_allreduce_bench_a3_readme.log")
    assert (r["tool"], r["verdict"], r["collective"]) == ("all_reduce_bench", "GO", "all_reduce")
    assert (r["algbw"], r["busbw"], r["max_size_bytes"], r["ranks"]) == (44.947, 84.275, 4_000_000_000, 16)
    low = _judge_file("torch_allreduce_bench_a3_readme.log", min_algbw=100.0)
    assert low["reasons"] == ["algbw 44.947 GB/s at 4000000000 bytes below 100.0 GB/s"]
    cut = "\n".join((DATA / "torch_allreduce_bench_a3_readme.log").read_text().splitlines()[:14])
    assert verdict.evaluate(cut)["reasons"] == ["the summary was cut before its algbw and busbw lines"]


def test_a_pingpong_server_logged_with_its_client_is_judged_by_the_client():
    r = _judge_file("synthetic_fi_pingpong_server_and_client.log")
    assert r["verdict"] == "GO" and [x["verdict"] for x in r["runs"]] == ["GO", "GO"]
    assert r["runs"][0]["role"] == "server" and r["runs"][1]["role"] == "client"
    assert r["notes"][0] == "fi_pingpong #1 (lines 1-1): server side: judged by its client, fi_pingpong #2"
    # a server alone (no client figures anywhere) is still a run that measured nothing
    assert _judge_file("fi_pingpong_server_hang_issue11256.log")["verdict"] == "NO-GO"


def test_processes_that_ran_alone_are_found_whatever_the_order_of_their_lines():
    r = _judge_file("synthetic_alone_interleaved_ranks.log")
    assert r["verdict"] == "NO-GO"
    assert r["reasons"][0].startswith(verdict.ALONE_REASON) and "(2 processes" in r["reasons"][0]


def test_reducing_maxbytes_moves_the_largest_size_the_sweep_must_reach():
    r = _judge_file("synthetic_reducing_maxbytes.log", expect_transport="efa")
    assert r["verdict"] == "GO" and r["max_size_bytes"] == 1 << 30
    assert "maxBytes reduced to 1073741824 to fit in GPU memory (nccl-tests' own line)" in r["notes"]
    # without nccl-tests' own line, stopping there is still stopping short
    assert _judge_file("efa_p5_allreduce_truncated.log")["verdict"] == "NO-GO"


def test_one_row_per_datatype_is_judged_by_the_lowest_at_the_largest_size():
    r = _judge_file("synthetic_datatypes_half_slow.log", min_algbw=150.0)
    assert r["verdict"] == "NO-GO" and r["algbw"] == 90.36
    assert r["reasons"] == ["algbw 90.36 GB/s at 8589934592 bytes below 150.0 GB/s"]


def test_a_footer_without_the_out_of_bounds_line_reached_the_summary():
    r = _judge_file("synthetic_footer_without_oob.log", expect_transport="efa")
    assert r["verdict"] == "GO"
    assert r["notes"] == ["no 'Out of bounds' line in the footer: correctness rests on the #wrong column"]


@pytest.mark.parametrize(
    "prefix", ["0: [prterun-node-a-2841@1,0]<stdout>: ", "[rank0]:[rank0]: ", "[node-a:0]: 0: ", "[0] "]
)
def test_two_launcher_prefixes_and_the_newer_ones_are_stripped(prefix):
    text = "\n".join(prefix + ln[3:] for ln in (DATA / "efa_p5_allreduce_16g.log").read_text().splitlines())
    assert verdict.evaluate(text, expect_transport="efa")["verdict"] == "GO"
    assert _judge_file("synthetic_prrte_srun_labels.log", expect_transport="efa")["verdict"] == "GO"
