"""GO / NO-GO verdicts for the first-boot validation gate (stdlib only).

Reads the logs of nccl-tests (every output generation seen in the field), of
fi_pingpong and of our MPI-free PyTorch measurement (torch_comm_bench.py) and
prints one JSON object per log.  A log is split into runs (each tool banner starts
one), every run is judged and named (tool, ordinal, line range), and any NO-GO run
makes the log NO-GO.

    python3 -m nodeside.verdict [--instance-type TYPE] [--expect-transport efa|ib|any]
        [--expect-nics N] [--min-busbw GBPS] [--min-algbw GBPS] [--max-latency-us US]
        [--json] LOG...

Prints, per log, the file, its verdict and per run the figures against their floors;
`--json` prints one JSON object per log instead.

Exit status (the table of every gpu-cluster CLI): 0 every log GO, 1 some log NO-GO,
2 usage or a log that is not a regular file (or too large), 3 a log cannot be read,
4 an internal error (GPU_CLUSTER_DEBUG=1 prints the traceback).

Ships to the nodes as /opt/gpu-cluster/lib/verdict.py inside the node payload, with
no project imports at run time: the instance table comes from instance_types.json
next to it (rendered from model/catalog.py by userdata/validation_files.py).
"""

import argparse
import json
import math
import os
import re
import stat
import sys
import traceback

# The exit-code table of every gpu-cluster CLI: a copy of clitools/exits.py (the node-side
# programs run as single files and cannot import the package); tests/repo/test_exit_codes.py
# keeps every copy equal to it. validation_report.py uses this one.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
DEBUG_ENV = "GPU_CLUSTER_DEBUG"
# The largest log read: a 16-node NCCL_DEBUG=INFO sweep is tens of MB; a device or a
# runaway file is refused instead of read without end.
MAX_LOG_BYTES = 512 << 20

# Go/no-go fractions.  A reference run (P6-B200, 2 nodes, DLAMI of 2026-10) reaches
# all-reduce algbw 374 GB/s at 16 GiB = 94% of the ~400 GB/s per-node EFA, and
# all-to-all per-GPU inter-node traffic (algbw / 2 on 2 nodes) of ~48 GB/s = 95%
# of the per-GPU ceiling.  Published healthy p5 runs on older stacks reach only
# ~65% on all-reduce (awsome-distributed-training README: 259.8 GB/s at 16 GiB),
# while the failures this gate exists for cost far more: one CPU per rank drops
# to 1/4-1/10 (reference: 92 vs 368 GB/s, 8.7 vs 95 GB/s) and a socket fallback to a
# few percent.  0.60 sits between the two: every healthy published run passes,
# every known misconfiguration fails.  Smaller regressions are caught by the
# recorded baseline (validation_report.py, margin from the stack config).
ALLREDUCE_FRACTION = 0.60
ALLTOALL_FRACTION = 0.60
# fi_pingpong 64 B round trip: reference run 10.85 us.  Latency is informative,
# not the gate's main signal; ~3x the reference still flags a path that is not
# OS-bypass without failing on instance-generation differences.
PINGPONG_MAX_US = 30.0
# Old nccl-tests print the maximum relative error instead of a #wrong count;
# float rounding stays around 1e-7..1e-6, a broken reduction shows 1e+00.
OLD_ERROR_LIMIT = 1e-3


def thresholds(efa_gbps, gpus, nics):
    """Per-instance go/no-go figures from catalog numbers (2-node runs).

    efa_gbps: physical per-node EFA bandwidth in Gbit/s (3200 on p5/p6, 400 on
    p4d); gpus: GPUs per node; nics: EFA devices per node (NCCL's "found N nics").
    """
    node = efa_gbps / 8.0  # GB/s per node
    per_gpu = node / gpus
    return {
        "expect_transport": "efa",
        "expect_nics": int(nics),
        "node_efa_gbytes": round(node, 2),
        "per_gpu_efa_gbytes": round(per_gpu, 2),
        # judged on algbw: with NVLS/tree, busbw can exceed the NIC bandwidth
        # (intra-node NVLink carries part of the traffic) [NCCL-TESTS-PERF]
        "all_reduce_min_algbw": round(ALLREDUCE_FRACTION * node, 1),
        # per-GPU inter-node traffic = algbw * (nodes-1)/nodes = algbw/2 on 2 nodes
        "alltoall_min_algbw": round(ALLTOALL_FRACTION * per_gpu * 2, 1),
        "pingpong_max_latency_us": PINGPONG_MAX_US,
        "fractions": {"all_reduce": ALLREDUCE_FRACTION, "alltoall": ALLTOALL_FRACTION},
    }


def busbw_factor(op, nranks):
    """nccl-tests' busbw = algbw * factor (doc/PERFORMANCE.md)."""
    if nranks <= 1:
        return 0.0 if op in ("all_reduce", "alltoall", "all_to_all") else 1.0
    if op == "all_reduce":
        return 2.0 * (nranks - 1) / nranks
    return (nranks - 1) / nranks  # alltoall / all_gather / reduce_scatter


INSTANCE_TYPES_FILE = "instance_types.json"


def _instance_types():
    """instance type -> (EFA Gbit/s per node, GPUs, EFA devices), from the data file
    next to this one.

    The catalog (model/catalog.py) is the one home of these figures; the nodes have none
    of our modules, so they get the figures as data, and a checkout has the same file
    (tests keep it equal to the catalog)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), INSTANCE_TYPES_FILE)
    with open(path, encoding="utf-8") as f:
        table = json.load(f)
    return {name: (t["efa_gbps"], t["gpus"], t["efa_count"]) for name, t in sorted(table.items())}


INSTANCE_TYPES = _instance_types()

# Every pattern below is linear in the line length: anchored or starting with a
# literal, no nested or overlapping repeats, bounded where a name is scanned.  Lines
# are checked with a plain substring test first, so a 50 MB log takes seconds and a
# megabyte-long line cannot trigger backtracking.
HEADER = re.compile(
    r"nThread\s+\d+\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)"
    r"\s+step:\s+(\d+)\((factor|bytes)\)"
)
VALIDATION = re.compile(r"validation:\s*(\d+)")
# size count type [redop] [root] then time algbw busbw #wrong twice (out-of-place, in-place);
# `$` fixes the column count, so the bounded lazy middle has one way to match
_F = r"(\d+(?:\.\d+)?)"
ROW = re.compile(
    rf"(\d+)\s+\d+\s+[a-z][a-z0-9_]*\s+(?:\S+\s+){{0,4}}?{_F}\s+{_F}\s+{_F}\s+(\S+)\s+{_F}\s+{_F}\s+{_F}\s+(\S+)$"
)
# #wrong is an integer or N/A; old versions print the max error as "5e-07"
WRONG = re.compile(r"^(?:\d+|N/A|\d(?:\.\d+)?e[-+]\d+)$")
OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)")
AVG = re.compile(r"Avg bus bandwidth\s*:\s*([\d.]+)")
NETWORK = re.compile(r"Using network (\S+(?: Libfabric)?)")
PROVIDER = re.compile(r"Selected [Pp]rovider is ([\w;]+)")
NICS = re.compile(r"found (\d+) nics")
# nccl-tests lowers the requested maxBytes to what fits in GPU memory after printing the
# header line, and says so in this line: the sweep then ends there on purpose.
REDUCED = re.compile(r"Reducing maxBytes to (\d+)")
# The PyTorch all-reduce benchmark in common use (ml-engineering's all_reduce_bench.py):
# a three-line summary, "The average bandwidth of all_reduce with a 4.0GB payload (5 trials,
# 16 ranks):" then " algbw: 44.947 GBps (359.6 Gbps)" and " busbw: ..." [ML-ENG-ARB].
ARB_HEAD = re.compile(r"^The average bandwidth of (\w+) with a ([\d.]+)GB payload \((\d+) trials, (\d+) ranks\)")
ARB_FIGURE = re.compile(r"^(algbw|busbw): ([\d.]+) GBps")
# NCCL's line prefix "host:pid:tid [dev]": its first whitespace token
HOSTPID = re.compile(r"([\w.-]+):(\d+):\d+")
NRANKS = re.compile(r"\bnranks (\d+)\b")
# "#  Rank  0 Group  0 Pid 123 on host device  0 ..." (the "#" is lost in some quotes)
RANKLINE = re.compile(r"#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device")
COLLS = ("alltoall", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv", "hypercube")
COLLS += ("gather", "scatter", "reduce")
FAIL_KEYS = (
    "Test NCCL failure",
    "Test CUDA failure",
    "Test failure",
    "slurmstepd: error",
    "srun: error",
    "MPI_ABORT",
    "opal_shmem_base_select failed",
    "Segmentation fault",
    "CANCELLED",
    "timeout: sending signal",
    "Traceback (most recent call last)",
    "gate: command exit status",
)
TORCH = re.compile(
    r"^(all_reduce|all_to_all)\s+(\d+) B\s+time\s+([\d.]+) ms\s+algbw\s+([\d.]+) GB/s"
    r"\s+busbw\s+([\d.]+) GB/s"
)
TORCH_HEAD = re.compile(r"# torch_comm_bench op=(\w+) world=(\d+) nodes=(\d+) max_bytes=(\d+)")
PP_ROW = re.compile(
    r"^(\d+(?:\.\d+)?[kmg]?)\s+(\d+[kmg]?)\s+(?:=?\d+[kmg]?\s+)?(\S+)\s+([\d.]+)s\s+"
    r"([\d.]+)\s+([\d.]+)\s+([\d.]+)$"
)
PP_CALL = re.compile(r"(?:fi|ft)_\w{1,64}\(\)")
SOCKET_REASON = "NCCL fell back to TCP sockets ('Using network Socket')"
ALONE_REASON = "every process ran alone: nccl-tests built without MPI=1?"


# Launcher prefixes: `srun -l`/`--label` ("0: ", " 12: "), `mpirun --tag-output`
# ("[1,0]<stdout>:", Open MPI 5's PRRTE form "[prterun-host-123@1,0]<stdout>:"), "[rank N] "
# / "[rankN]:" (also twice: "[rank0]:[rank0]:"), torchrun's "[host:rank]:", Intel MPI's
# -prepend-rank "[0] ", after any indentation, a few deep (markdown quotes, srun around
# mpirun).  A label is short and followed by a blank, so result rows ("   8    2   float")
# and NCCL's "host:pid:tid" never match.  Every name inside is bounded, so the match stays
# linear in the line.
PREFIX = re.compile(
    r"(?:[ \t]*(?:\d{1,7}:(?=[ \t]|$)"
    r"|\[(?:[\w.-]{1,64}@)?\d{1,7},\d{1,7}\]<std[a-z]{2,4}>:"
    r"|\[rank ?\d{1,7}\]:?(?=[ \t\[]|$)"
    r"|\[[\w.-]{1,253}:\d{1,7}\]:"
    r"|\[\d{1,7}\](?=[ \t])"
    r")){0,4}[ \t]*"
)
PREFIX_START = frozenset(" \t0123456789[")


def _strip(line):
    """The line without launcher prefixes, indentation and trailing blanks."""
    if line[:1] in PREFIX_START:
        line = line[PREFIX.match(line).end() :]
    return line.rstrip()


def _size(tok):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(tok[-1:], 1)
    return int(float(tok.rstrip("kmg")) * mult)


def _nccl_proc(ln):
    """(host, pid) of an NCCL debug line ("host:pid:tid [dev] ... NCCL ..."), else None."""
    m = HOSTPID.fullmatch(ln[: ln.find(" ")]) if " NCCL " in ln else None
    return (m.group(1), m.group(2)) if m else None


def _nccl_hosts(lines):
    # the distinct "host:pid:tid" tokens first: a big log repeats a few of them
    toks = {ln[: ln.find(" ")] for ln in lines if " NCCL " in ln}
    return {m.group(1) for t in toks for m in [HOSTPID.fullmatch(t)] if m}


def _transport(text, result):
    """Transport and NIC count from NCCL_DEBUG=INFO lines, shared by nccl-tests and torch.

    "NET/Socket : Using [0]eth0" is the socket plugin listing its interfaces, printed
    also when another network carries the data (NCCL-229 log), so only "Using network
    Socket" and channels "via NET/Socket" count as the socket transport."""
    nets = {m.group(1) for m in NETWORK.finditer(text)}
    if "via NET/Socket" in text:
        nets.add("Socket")
    provs = sorted({m.group(1) for m in PROVIDER.finditer(text)})
    nics = [int(m.group(1)) for m in NICS.finditer(text)]
    kinds = set()
    for net in nets:
        if net == "Socket":
            kinds.add("socket")
        elif net.startswith("IB"):
            kinds.add("ib")
        elif "Libfabric" in net or "OFI" in net:
            kinds.add("efa" if not provs or provs == ["efa"] else "ofi-" + provs[0])
    if not nets and provs:
        kinds.add("efa" if provs == ["efa"] else "ofi-" + provs[0])
    result["transport"] = "+".join(sorted(kinds)) or None
    result["nics"] = min(nics) if nics else None
    if not kinds:
        result["notes"].append("no transport line in the log: verdict rests on bandwidth alone")


def _check_transport(result, expect, expect_nics):
    t = result["transport"]
    kinds = set(t.split("+")) if t else set()
    # Sockets carry no data between GPUs of one host, so they are harmless there; but
    # when the network is expected (EFA/IB) a socket path fails whatever the node count
    # shows (the hosts may be hidden by how the log was captured).
    if "socket" in kinds and (result.get("nodes") != 1 or expect in ("efa", "ib")):
        result["reasons"].append(SOCKET_REASON)
    if t and expect != "any" and t != expect and t != "socket":
        result["reasons"].append(f"transport {t}, expected {expect}")
    if expect in ("efa", "ib") and result.get("rank_nodes") == 1:
        # NVLink alone clears the floors on one node: such a run says nothing of the fabric
        result["reasons"].append(
            f"ran on one node: no {expect} traffic between nodes was measured; run it across two nodes"
        )
    if expect_nics and result["nics"] is not None and result["nics"] < expect_nics:
        result["reasons"].append(f"NCCL found {result['nics']} nics, expected {expect_nics}")


def _failures(text, result):
    # whole-text searches (one C-level scan per key), then the first one's line
    n = text.count("NCCL WARN")
    if n:
        at = text.find("NCCL WARN") + len("NCCL WARN")
        first = text[at : text.find("\n", at) % (len(text) + 1)].strip()
        result["reasons"].append(f"{n} NCCL WARN line(s), first: {first[:160]}")
    hits = [at for at in (text.find(key) for key in FAIL_KEYS) if at >= 0]
    if hits:
        at = min(hits)
        fail = text[at : text.find("\n", at) % (len(text) + 1)].strip()
        result["reasons"].append(f"run failed: {fail[:160]}")


def _wrong(tok, ignore):
    """#wrong count, old error magnitude, or None for N/A (not checked)."""
    if tok == "N/A" or ignore:
        return None
    if "e" in tok:
        return 1 if float(tok) > OLD_ERROR_LIMIT else 0
    return int(tok)


def _nccl_rows(lines, alltoall):
    rows = []
    for ln in lines:
        m = ROW.match(ln) if ln[:1].isdigit() else None
        # a cut-off row or an unrelated numeric line does not match
        if m and WRONG.match(m.group(5)) and WRONG.match(m.group(9)):
            rows.append(
                {
                    "size": int(m.group(1)),
                    "algbw": float(m.group(3)),
                    "busbw": float(m.group(4)),
                    # in-place all-to-all is not verified (newer versions print N/A, old ones 1e+00)
                    "wrong": [_wrong(m.group(5), False), _wrong(m.group(9), alltoall)],
                }
            )
    return rows


def _expected_last(minb, maxb, step, mode):
    if mode == "factor":
        if step < 2 or minb <= 0:
            return minb
        return minb * step ** int(math.floor(math.log(maxb / minb, step) + 1e-9))
    return minb + ((maxb - minb) // step) * step if step else minb


def _ranks(lines):
    """Communicators printed under "# Using devices": each starts at Rank 0; a list of
    [(rank, pid, host), ...] per communicator."""
    comms = []
    for ln in lines:
        m = RANKLINE.match(ln) if "Rank" in ln and " on " in ln else None
        if m:
            entry = (int(m.group(1)), m.group(2), m.group(3))
            if entry[0] == 0 or not comms:
                comms.append([])
            comms[-1].append(entry)
    return comms


def _collective(text):
    """The collective of the first "<name>_perf" in the text, else "alltoall" if named."""
    at = text.find("_perf")
    while at >= 0:
        start = at
        while start > 0 and at - start < 16 and (text[start - 1].isalnum() or text[start - 1] == "_"):
            start -= 1
        end = at + len("_perf")
        if text[start:at] in COLLS and not (text[end : end + 1].isalnum() or text[end : end + 1] == "_"):
            return text[start:at]
        at = text.find("_perf", end)
    at = text.find("alltoall")
    while at >= 0:
        around = text[at - 1 : at] + text[at + 8 : at + 9]
        if not any(c.isalnum() or c == "_" for c in around):
            return "alltoall"
        at = text.find("alltoall", at + 8)
    return None


def parse_nccl_tests(text, lines):
    r = _new("nccl-tests")
    m = re.search(r"Collective test starting: (\w+)_perf", text)
    coll = m.group(1) if m else _collective(text)
    r["collective"] = coll
    comms = _ranks(lines)
    rank_hosts = {e[2] for c in comms for e in c}
    hosts = rank_hosts | _nccl_hosts(lines)
    r["nodes"] = len(hosts) or None
    # the device list names every rank's host: the one count that proves a single node
    r["rank_nodes"] = len(rank_hosts) or None
    r["ranks"] = max((len(c) for c in comms), default=None)
    _transport(text, r)
    heads = [ln for ln in lines if "nThread" in ln and HEADER.search(ln)]
    header = HEADER.search(heads[0]) if heads else None
    val = VALIDATION.search(heads[0]) if heads else None
    r["header"] = header.group(0) if header else None
    rows = _nccl_rows(lines, coll == "alltoall")
    if val and val.group(1) == "0":
        r["reasons"].append("correctness check switched off (-c 0 / validation: 0)")
    elif rows and all(w is None for row in rows for w in row["wrong"]):
        r["reasons"].append("correctness check switched off (#wrong column is N/A)")
    wrong = sum(w or 0 for row in rows for w in row["wrong"])
    oob = [m for ln in lines if "Out of bounds" in ln for m in [OOB.search(ln)] if m]
    if oob and oob[-1].group(2) == "FAILED":
        wrong = max(wrong, int(oob[-1].group(1)))
        r["reasons"].append(f"Out of bounds values : {oob[-1].group(1)} FAILED")
    elif wrong:
        r["reasons"].append(f"{wrong} wrong value(s) in the #wrong/error column")
    r["wrong"] = wrong
    if not rows:
        r["reasons"].append("no result rows: the test never produced a measurement")
    else:
        _largest(r, rows)
    _footer(r, lines, oob)
    _reached_largest(r, header, lines, rows)
    _failures(text, r)
    return r


def _reached_largest(r, header, lines, rows):
    """The sweep reached the largest size its header asked for (or nccl-tests' reduced one)."""
    if header:
        minb, maxb, step = (int(header.group(i)) for i in (2, 3, 4))
        mode = header.group(5)
        reduced = next((m for ln in lines if "Reducing maxBytes" in ln for m in [REDUCED.search(ln)] if m), None)
        if reduced and int(reduced.group(1)) < maxb:
            maxb = int(reduced.group(1))
            r["notes"].append(f"maxBytes reduced to {maxb} to fit in GPU memory (nccl-tests' own line)")
        r["requested_max_bytes"] = maxb
        want = _expected_last(minb, maxb, step, mode)
        # sizes are rounded down to a multiple of nranks*wordsize, so accept
        # anything beyond the previous step
        prev = want / step if mode == "factor" and step > 1 else want - step
        if rows and r["max_size_bytes"] <= prev:
            _stopped_short(r, r["max_size_bytes"], want)
    else:
        r["notes"].append("no nccl-tests header line: requested size range unknown")


def _largest(r, rows):
    """The figures at the largest size. With one row per datatype or operation (`-d all`,
    `-o all`) several rows share that size: the lowest bandwidth decides, not the first."""
    top = max(x["size"] for x in rows)
    at_top = [x for x in rows if x["size"] == top]
    worst = min(at_top, key=lambda x: x["algbw"])
    r.update(max_size_bytes=top, algbw=worst["algbw"], busbw=worst["busbw"])
    if len(at_top) > 1:
        r["notes"].append(f"{len(at_top)} rows at {top} bytes (one per datatype or operation): judged by the lowest")


def _footer(r, lines, oob):
    """The sweep ended when its footer printed "Avg bus bandwidth" (or the newer
    "Collective test concluded"); some versions print no "Out of bounds" line there."""
    avg = any("Avg bus bandwidth" in ln and AVG.search(ln) for ln in lines)
    concluded = any(ln.startswith("# Collective test concluded") for ln in lines)
    if not (avg or concluded):
        r["reasons"].append("never reached the summary lines (Out of bounds / Avg bus bandwidth)")
    elif not oob:
        r["notes"].append("no 'Out of bounds' line in the footer: correctness rests on the #wrong column")


def _stopped_short(r, reached, requested) -> None:
    # A sweep that ends before its largest size hung or crashed mid-run: its last
    # figure is not the bandwidth of the size that was asked for.
    r["reasons"].append(f"stopped at {reached} bytes, before the requested largest size {requested}")


def parse_torch(text, lines):
    r = _new("torch_comm_bench")
    head = next((m for ln in lines if "op=" in ln for m in [TORCH_HEAD.search(ln)] if m), None)
    nodes = int(head.group(3)) if head else None
    r["nodes"] = r["rank_nodes"] = nodes
    _transport(text, r)
    rows = [m for ln in lines if " B " in ln for m in [TORCH.match(ln)] if m]
    r["collective"] = rows[0].group(1) if rows else (head.group(1) if head else None)
    r["wrong"] = None  # the measurement does not verify data; nccl-tests does
    if not rows:
        r["reasons"].append("no result rows: the measurement never produced a figure")
    else:
        last = max(rows, key=lambda x: int(x.group(2)))
        r.update(max_size_bytes=int(last.group(2)), algbw=float(last.group(4)), busbw=float(last.group(5)))
        if head and int(last.group(2)) < int(head.group(4)):
            _stopped_short(r, last.group(2), head.group(4))
    if not any(ln.startswith("# torch_comm_bench done") for ln in lines):
        r["reasons"].append("never reached the summary line (# torch_comm_bench done)")
    _failures(text, r)
    return r


def parse_allreduce_bench(text, lines):
    """ml-engineering's all_reduce_bench.py summary (ARB_HEAD): figures of one payload size."""
    r = _new("all_reduce_bench")
    head = next((m for ln in lines if ln[:1] == "T" for m in [ARB_HEAD.match(ln)] if m), None)
    _transport(text, r)
    r["wrong"] = None  # the benchmark does not verify data; nccl-tests does
    figures = {m.group(1): float(m.group(2)) for ln in lines if ln[:1] in "ab" for m in [ARB_FIGURE.match(ln)] if m}
    if head is None:
        r["reasons"].append("no 'The average bandwidth of ...' summary line")
    else:
        r["collective"] = head.group(1)
        r["ranks"] = int(head.group(4))
        r["max_size_bytes"] = int(float(head.group(2)) * 1e9)  # the benchmark's GB is 1e9 bytes
    if head is not None and ("algbw" not in figures or "busbw" not in figures):
        r["reasons"].append("the summary was cut before its algbw and busbw lines")
    r.update(algbw=figures.get("algbw"), busbw=figures.get("busbw"))
    _failures(text, r)
    return r


def _pp_provider(ln):
    """fi_pingpong's provider from its command line ("-p efa", "-pefa", "--provider efa")."""
    toks = ln.split()
    at = next((i for i, t in enumerate(toks) if t.rsplit("/", 1)[-1] == "fi_pingpong"), None)
    if at is None:
        return None
    for i in range(at + 1, len(toks)):
        t = toks[i]
        if t in ("-p", "--provider") and i + 1 < len(toks):
            return toks[i + 1]
        if t.startswith("-p") and len(t) > 2 and t[2:].isalnum():
            return t[2:]
    return None


# fi_pingpong options that take a value; anything else after the options is the
# destination, which only the client names (`fi_pingpong [options] [dst_addr]`).
PP_VALUE_OPTS = frozenset(("-p", "--provider", "-e", "-d", "-f", "-I", "-S", "-B", "-P", "-s", "-m", "-D"))


def _pp_role(ln):
    """'client' (a destination is named), 'server' (none), None (not a command line)."""
    toks = ln.split()
    at = next((i for i, t in enumerate(toks) if t.rsplit("/", 1)[-1] == "fi_pingpong"), None)
    if at is None:
        return None
    i = at + 1
    while i < len(toks):
        t = toks[i]
        if t in PP_VALUE_OPTS:
            i += 2
            continue
        if not t.startswith("-"):
            return "client"
        i += 1
    return "server"


def parse_pingpong(text, lines):
    r = _new("fi_pingpong")
    r["transport"] = next((p for ln in lines if "fi_pingpong" in ln for p in [_pp_provider(ln)] if p), None)
    r["role"] = next((x for ln in lines if "fi_pingpong" in ln for x in [_pp_role(ln)] if x), None)
    rows = [m for ln in lines if ln[:1].isdigit() for m in [PP_ROW.match(ln)] if m]
    if not rows:
        r["reasons"].append(NO_PP_ROWS)
    else:
        small = min(rows, key=lambda x: _size(x.group(1)))
        r["latency_us"] = float(small.group(6))
        r["latency_size_bytes"] = _size(small.group(1))
        r["max_size_bytes"] = max(_size(x.group(1)) for x in rows)
    errs = []
    for ln in lines:
        m = PP_CALL.search(ln) if "()" in ln else None
        if (
            (m and ("ret=" in ln[m.start() :] or "error" in ln[m.start() :]))
            or "o such file" in ln
            or "o such device" in ln
        ):
            errs.append(ln[m.start() :] if m else ln)
    if errs:
        r["reasons"].append(f"fi_pingpong error: {errs[0].strip()[:160]}")
    _failures(text, r)
    if r["transport"] is None:
        r["notes"].append("no fi_pingpong command line in the log: provider not shown")
    return r


def _new(tool):
    return {
        "file": None,
        "tool": tool,
        "verdict": None,
        "transport": None,
        "nics": None,
        "max_size_bytes": None,
        "busbw": None,
        "algbw": None,
        "wrong": 0,
        "reasons": [],
        "notes": [],
    }


# --- splitting a log into runs ----------------------------------------------------------


def _banner(ln):
    """(tool, stage) when the line opens a tool's output, else None.  A run's banner
    can span several lines (nccl-tests: version, "Collective test starting", the
    nThread header, "# Using devices"); a later stage continues the same run."""
    c = ln[:1]
    if c == "#":
        if ln.startswith("# nccl-tests version"):
            return "nccl-tests", 0
        if ln.startswith("# Collective test starting"):
            return "nccl-tests", 1
        if "nThread" in ln and HEADER.search(ln):
            return "nccl-tests", 2
        if ln.startswith("# Using devices"):
            return "nccl-tests", 3
        if ln.startswith("# torch_comm_bench op="):
            return "torch_comm_bench", 1
    elif c == "U" and ln == "Using devices":
        return "nccl-tests", 3
    elif c == "b" and ln.startswith("bytes") and "usec/xfer" in ln:
        return "fi_pingpong", 1
    elif c == "T" and ln.startswith("The average bandwidth of ") and ARB_HEAD.match(ln):
        return "all_reduce_bench", 1
    if "fi_pingpong" in ln and any(t.rsplit("/", 1)[-1] == "fi_pingpong" for t in ln.split()):
        return "fi_pingpong", 0
    if "nThread" in ln and ln.startswith("nThread") and HEADER.search(ln):
        return "nccl-tests", 2
    return None


def _is_body(tool, ln):
    """A line that only a running tool prints: once seen, a new banner is a new run."""
    c = ln[:1]
    if tool == "nccl-tests":
        return c.isdigit() or ("Rank" in ln and bool(RANKLINE.match(ln)))
    if tool == "torch_comm_bench":
        return c == "a" and bool(TORCH.match(ln))
    if tool == "all_reduce_bench":
        return c == "a" and bool(ARB_FIGURE.match(ln))
    return c.isdigit() and bool(PP_ROW.match(ln))


def _is_end(ln):
    return ln.startswith(("# Avg bus bandwidth", "# Collective test concluded", "# torch_comm_bench done")) or (
        ln.startswith("Avg bus bandwidth")
    )


def _launches(ln):
    """The tool a command line starts (its banner follows on later lines), else None;
    also the gate's own first line of each log ("# all_reduce_perf ... on a,b")."""
    for t in ln.split():
        base = t.rsplit("/", 1)[-1]
        if base.endswith("_perf"):
            return "nccl-tests"
        if base in ("torch_comm_bench.py", "torch_comm_bench"):
            return "torch_comm_bench"
    return None


def split_runs(lines):
    """[{tool, first, last, lines}] in log order (line numbers 1-based), covering every
    line.  Lines before the first banner belong to the first run; after a run has
    printed results, a command line that launches a tool begins the next run."""
    runs, cur, pending = [], None, None
    for i, ln in enumerate(lines):
        c = ln[:1]
        b = _banner(ln) if c in "#bUnT" or "fi_pingpong" in ln else None
        if b:
            tool, stage = b
            same = cur is not None and cur["tool"] == tool and not cur["body"] and not cur["ended"]
            if same and ln in cur["banners"]:
                # the same banner again before any output: concurrent processes each
                # printing their own header (a launch without MPI), one run
                continue
            if not (same and stage > cur["stage"]):
                start = 0 if cur is None else (pending if pending is not None else i)
                if cur is not None:
                    cur["end"] = start
                cur = {"tool": tool, "start": start, "body": False, "ended": False, "banners": set()}
                runs.append(cur)
                pending = None
            cur["stage"] = stage
            cur["banners"].add(ln)
            continue
        if cur is None or pending is not None:
            continue  # the first run's preamble, or the next run's
        if c in "#A" and _is_end(ln):
            cur["ended"] = True
        elif (cur["ended"] or cur["body"]) and ("_perf" in ln or "torch_comm_bench" in ln) and _launches(ln):
            pending = i
        elif not cur["body"] and _is_body(cur["tool"], ln):
            cur["body"] = True
    if cur is None:
        return [{"tool": _guess(lines), "first": 1, "last": max(len(lines), 1), "lines": lines}]
    cur["end"] = len(lines) if pending is None else pending
    if pending is not None:
        # a launch that never printed its banner: a run of its own that produced nothing
        runs.append({"tool": _launches(lines[pending]), "start": pending, "end": len(lines)})
    for run in runs:
        run["lines"] = lines[run["start"] : run["end"]]
        run["first"], run["last"] = run["start"] + 1, max(run["end"], run["start"] + 1)
    return runs


def _guess(lines):
    if any("usec/xfer" in ln or "fi_pingpong" in ln for ln in lines):
        return "fi_pingpong"
    if any("torch_comm_bench" in ln or (ln[:1] == "a" and TORCH.match(ln)) for ln in lines):
        return "torch_comm_bench"
    if any(ln.startswith("The average bandwidth of ") for ln in lines):
        return "all_reduce_bench"
    return "nccl-tests"


def _alone(runs):
    """Header keys of nccl-tests runs whose processes each ran in their own
    communicator: a build without MPI under srun/mpirun prints one header and one
    "Rank 0" per process and measures nothing between them.  Several one-rank
    communicators of one sweep are that, wherever they sit in the log; several
    one-process communicators of more GPUs are that when they are interleaved in one
    run on different hosts (separate runs of them are single-node sweeps, one after
    the other)."""
    comms, solo_init, multi_init = {}, {}, False
    for run in runs:
        if run["tool"] != "nccl-tests":
            continue
        key = run["result"].get("header")
        cs = _ranks(run["lines"])
        comms.setdefault(key, []).append(cs)
        for ln in run["lines"]:
            if "nranks" in ln and "NCCL INFO" in ln:
                m, proc = NRANKS.search(ln), _nccl_proc(ln)
                if m and proc and m.group(1) == "1":
                    solo_init.setdefault(key, set()).add(proc)
                elif m and m.group(1) != "1":
                    multi_init = True
    alone = {}
    for key, per_run in comms.items():
        cs = [c for run_cs in per_run for c in run_cs]
        procs = {(c[0][2], c[0][1]) for c in cs}
        hosts = {e[2] for c in cs for e in c}
        one_rank = len(cs) > 1 and all(len(c) == 1 for c in cs)
        interleaved = any(
            len(rc) > 1 and len({e[2] for c in rc for e in c}) > 1 and all(len({e[1] for e in c}) == 1 for c in rc)
            for rc in per_run
        )
        # two processes each holding a Rank 0 in one run: two communicators, however their
        # lines interleave (a real run lists its ranks once, from rank 0)
        roots = any(len({(c[0][2], c[0][1]) for c in rc}) > 1 for rc in per_run)
        if len(procs) > 1 and (one_rank or interleaved or roots):
            alone[key] = (len(procs), len(hosts))
    for key, procs in solo_init.items():
        if key not in alone and len(procs) > 1 and not multi_init:
            alone[key] = (len(procs), len({h for h, _ in procs}))
    return alone


# --- judging ------------------------------------------------------------------------------


def _floor(name, value):
    if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")
    return value


def _judge(run, text, expect_transport, expect_nics, min_busbw, min_algbw, max_latency_us, catalog):
    lines = run["lines"]
    tool = run["tool"]
    if expect_transport is None:  # not given: the instance type's, else anything
        expect_transport = catalog["expect_transport"] if catalog else "any"
    if tool == "fi_pingpong":
        r = parse_pingpong(text, lines)
        if max_latency_us is None and catalog:
            max_latency_us = catalog["pingpong_max_latency_us"]
        lat = r.get("latency_us")
        if max_latency_us is not None and lat is not None and lat > max_latency_us:
            r["reasons"].append(f"latency {lat} us at {r['latency_size_bytes']} B above {max_latency_us} us")
        if expect_transport != "any" and r["transport"] and r["transport"] != expect_transport:
            r["reasons"].append(f"provider {r['transport']}, expected {expect_transport}")
        r["floors"] = _floors(latency_us=max_latency_us, transport=expect_transport)
        return r
    parse = {"torch_comm_bench": parse_torch, "all_reduce_bench": parse_allreduce_bench}.get(tool, parse_nccl_tests)
    r = parse(text, lines)
    if catalog:
        # applied whatever node count the log shows: the hosts a log names are a lower
        # bound (prefixes, quotes, lost lines), and a one-node run on these types still
        # loads the EFA plugin and clears the floors over NVLink
        key = {"all_reduce": "all_reduce_min_algbw", "alltoall": "alltoall_min_algbw"}.get(
            "alltoall" if r.get("collective") == "all_to_all" else r.get("collective")
        )
        if min_algbw is None and key:
            min_algbw = catalog[key]
        if expect_nics is None:
            expect_nics = catalog["expect_nics"]
    _check_transport(r, expect_transport, expect_nics)
    size = r["max_size_bytes"]
    for key, floor in (("busbw", min_busbw), ("algbw", min_algbw)):
        if floor is not None and r[key] is not None and r[key] < floor:
            r["reasons"].append(f"{key} {r[key]} GB/s at {size} bytes below {floor} GB/s")
    r["floors"] = _floors(algbw=min_algbw, busbw=min_busbw, nics=expect_nics, transport=expect_transport)
    return r


def _floors(**limits):
    """The limits a run was judged against (None and "any": not judged)."""
    return {k: v for k, v in limits.items() if v is not None and v != "any"}


def evaluate(
    text,
    expect_transport=None,
    expect_nics=None,
    min_busbw=None,
    min_algbw=None,
    max_latency_us=None,
    name=None,
    instance_type=None,
):
    """Verdict dict for one log's text: the fields of its deciding run (the first NO-GO
    run, else the last run), every run under "runs", and the reasons of all runs (each
    named by its run when the log holds more than one)."""
    for key, value in (("min_busbw", min_busbw), ("min_algbw", min_algbw), ("max_latency_us", max_latency_us)):
        _floor(key, value)
    if expect_nics is not None and (not isinstance(expect_nics, int) or expect_nics < 0):
        raise ValueError(f"expect_nics must be a count of NICs (0: no expectation), got {expect_nics!r}")
    catalog = None
    if instance_type is not None:
        if instance_type not in INSTANCE_TYPES:
            raise ValueError(f"unknown instance type {instance_type!r}; known: {', '.join(INSTANCE_TYPES)}")
        catalog = thresholds(*INSTANCE_TYPES[instance_type])
    lines = [_strip(raw) for raw in text.splitlines()]
    runs = split_runs(lines)
    seen = {}
    for run in runs:
        seen[run["tool"]] = seen.get(run["tool"], 0) + 1
        run["ordinal"] = seen[run["tool"]]
        body = "\n".join(run["lines"])
        run["result"] = _judge(run, body, expect_transport, expect_nics, min_busbw, min_algbw, max_latency_us, catalog)
    alone = _alone(runs)
    _pair_pingpong(runs)
    for run in runs:
        r = run["result"]
        if run["tool"] == "nccl-tests" and r.get("header") in alone:
            procs, hosts = alone[r["header"]]
            r["reasons"].insert(0, f"{ALONE_REASON} ({procs} processes, each its own communicator, on {hosts} host(s))")
        r["run"] = f"{run['tool']} #{run['ordinal']} (lines {run['first']}-{run['last']})"
        r["lines"] = [run["first"], run["last"]]
        r["file"] = name
        r["verdict"] = "NO-GO" if r["reasons"] else "GO"
    results = [run["result"] for run in runs]
    deciding = next((r for r in results if r["verdict"] == "NO-GO"), results[-1])
    out = dict(deciding)
    many = len(results) > 1
    out["reasons"] = [f"{r['run']}: {x}" if many else x for r in results for x in r["reasons"]]
    out["notes"] = [f"{r['run']}: {x}" if many else x for r in results for x in r["notes"]]
    out["runs"] = [dict(r) for r in results]
    out["verdict"] = "NO-GO" if out["reasons"] else "GO"
    return out


NO_PP_ROWS = "no result rows: the client never completed a ping-pong"


def _pair_pingpong(runs):
    """A fi_pingpong server logged with its client: the server prints no figures, the
    client does; the pair is judged by the client, the server's run is not a failure."""
    clients = [r for r in runs if r["tool"] == "fi_pingpong" and r["result"].get("latency_us") is not None]
    if not clients:
        return
    for run in runs:
        r = run["result"]
        if run["tool"] == "fi_pingpong" and r.get("role") == "server" and NO_PP_ROWS in r["reasons"]:
            r["reasons"].remove(NO_PP_ROWS)
            c = clients[0]
            r["notes"].append(f"server side: judged by its client, fi_pingpong #{c['ordinal']}")


def _positive(kind):
    def parse(value):
        try:
            x = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
        if not (math.isfinite(x) and x > 0):
            raise argparse.ArgumentTypeError(f"{value!r} is not a finite positive number")
        return x

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def read_log(path, limit=MAX_LOG_BYTES):
    """(text, None, None) or (None, why, exit code): a regular file of at most `limit`
    bytes, undecodable bytes replaced. A device or a FIFO is refused before it is opened
    (/dev/zero would be read without end, a FIFO would block the open)."""
    try:
        st = os.stat(path)
    except OSError as e:
        return None, f"cannot read log: {e.strerror or e}", EXIT_UNREACHABLE
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, FIFO or socket)"
        return None, f"not a log file: {kind}", EXIT_USAGE
    if st.st_size > limit:
        return None, f"log of {st.st_size} bytes, more than the {limit >> 20} MiB read", EXIT_USAGE
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        return None, f"cannot read log: {e.strerror or e}", EXIT_UNREACHABLE
    if len(data) > limit:
        return None, f"log grew past the {limit >> 20} MiB read", EXIT_USAGE
    return data.decode("utf-8", errors="replace"), None, None


def guarded(prog, body):
    """body() with the table's last rows: Ctrl-C 130, a bug one line and exit 4."""
    try:
        return body()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (Exception, MemoryError) as e:  # a bug: one line, the traceback on request
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        text = " ".join(str(e).split())[:500]
        print(
            f"{prog}: internal error: {type(e).__name__}: {text}; rerun with {DEBUG_ENV}=1 for the traceback",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


VERSION_FILE = "version"


def version():
    """The payload's version (lib/version, written from the package's version home), or
    the checkout's version home (model/version.py) when run from a checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path, pattern in (
        (os.path.join(here, VERSION_FILE), r"^(\S+)\s*$"),
        (os.path.join(here, os.pardir, "model", "version.py"), r'(?m)^VERSION = "([^"]+)"'),
    ):
        try:
            with open(path, encoding="utf-8") as f:
                m = re.search(pattern, f.read(65536))
        except OSError:
            continue
        if m:
            return m.group(1)
    return "unknown"


def _figure(run, key, unit, floor_key, above):
    value = run.get(key)
    if value is None:
        return None
    floor = run.get("floors", {}).get(floor_key)
    text = f"{key.removesuffix('_us')} {value:g} {unit}"
    if floor is not None:
        text += f" ({'ceiling' if above else 'floor'} {floor:g})"
    return text


def human_lines(r):
    """The verdict of one log as a person reads it: file and verdict, then per run its
    figures against their floors, then the reasons and notes."""
    lines = [f"{r['file']}: {r['verdict']}"]
    for run in r.get("runs", []):
        figures = [
            f
            for f in (
                f"{run['max_size_bytes']} B" if run.get("max_size_bytes") is not None else None,
                _figure(run, "algbw", "GB/s", "algbw", False),
                _figure(run, "busbw", "GB/s", "busbw", False),
                _figure(run, "latency_us", "us", "latency_us", True),
                f"transport {run['transport']}"
                + (f" (expected {run['floors']['transport']})" if run.get("floors", {}).get("transport") else "")
                if run.get("transport")
                else None,
                f"nics {run['nics']}"
                + (f" (expected {run['floors']['nics']})" if run.get("floors", {}).get("nics") else "")
                if run.get("nics") is not None
                else None,
            )
            if f
        ]
        what = f" {run['collective']}" if run.get("collective") else ""
        lines.append(f"  {run['verdict']}: {run['run']}{what}" + (": " + ", ".join(figures) if figures else ""))
    lines += [f"  NO-GO: {why}" for why in r["reasons"]]
    lines += [f"  note: {note}" for note in r["notes"]]
    return lines


def _parser():
    p = argparse.ArgumentParser(
        prog="verdict.py",
        description="GO / NO-GO verdicts for validation logs (nccl-tests, fi_pingpong, torch_comm_bench)",
        epilog="example:\n  python3 -m nodeside.verdict --instance-type p5.48xlarge all_reduce.log",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"verdict.py (gpu-cluster) {version()}")
    p.add_argument(
        "--instance-type",
        choices=sorted(INSTANCE_TYPES),
        help="apply this instance type's catalog floors (EFA, NIC count, algbw, latency); default: none",
    )
    p.add_argument("--expect-transport", choices=("efa", "ib", "any"), help="default: the instance type's, else any")
    p.add_argument("--expect-nics", type=_positive(int), help="default: the instance type's, else none")
    p.add_argument("--min-busbw", type=_positive(float), help="GB/s at the largest size (default: none)")
    p.add_argument(
        "--min-algbw", type=_positive(float), help="GB/s at the largest size (default: the instance type's, else none)"
    )
    p.add_argument(
        "--max-latency-us", type=_positive(float), help="fi_pingpong, smallest size (default: the instance type's)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per log on stdout instead of the human lines")
    p.add_argument("logs", nargs="+", metavar="LOG")
    return p


def _worst(status, code):
    """Bad input outranks an unreadable log, which outranks a NO-GO."""
    order = (EXIT_OK, EXIT_FAILED, EXIT_UNREACHABLE, EXIT_USAGE)
    return max(status, code, key=order.index)


def main(argv=None):
    a = _parser().parse_args(argv)

    def body():
        status = EXIT_OK
        for path in a.logs:
            text, why, code = read_log(path)
            if text is None:
                r = _new(None)
                r.update(file=path, verdict="NO-GO", reasons=[why], runs=[])
            else:
                r = evaluate(
                    text,
                    a.expect_transport,
                    a.expect_nics,
                    a.min_busbw,
                    a.min_algbw,
                    a.max_latency_us,
                    name=path,
                    instance_type=a.instance_type,
                )
                code = EXIT_OK if r["verdict"] == "GO" else EXIT_FAILED
            status = _worst(status, code)
            print(json.dumps(r, sort_keys=True) if a.json else "\n".join(human_lines(r)), flush=True)
        return status

    return guarded("verdict.py", body)


if __name__ == "__main__":
    sys.exit(main())
