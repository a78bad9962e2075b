"""Validation run bookkeeping: step verdicts, node pairs, report, baseline, drains.

Stdlib only; ships as /opt/gpu-cluster/lib/validation_report.py next to verdict.py.
gate.sh stays thin and calls, per run directory <fsx_root>/validation/<run-id>/:

  start --nodes a,b --job-id J [--newcomers a --partner b]
                                    run.json (node list; a join run names its newcomers
                                    and the healthy partner already in service)
  plan  --nodes a,b --features F    node pairs "A B KIND LEVEL" (F: `sinfo -h -N -o '%N %f'`;
                                    LEVEL from the controller's topology record, `-` without)
  retest-plan                       pairs measuring again the nodes of outlier and NO-GO
                                    pairs, "A B KIND LEVEL SUSPECT" (pair_topology.py)
  check --step S --nodes a,b [--kind K] [--level L] [--retest-of a+b] --log L
                                    verdict of one step, exit 0 GO / 1 NO-GO
  skip  --step S --nodes a,b [--kind K] [--level L] [--retest-of a+b] --reason R
  build [--drain]                   report.json + summary.txt, baseline, drains
  status                            overall verdict of the latest run, and each node's health record
                                    (controller): exit 0 GO, 1 NO-GO, 3 no run (or its report) to read
  settings KEY...                   config.json values for gate.sh, one per line
"""

import argparse
import itertools
import json
import os
import re
import sys
import time

# statistics and subprocess are imported where they are used: the gate starts this program
# about 25 times a run and only the report (medians) and the drain need them; they were a
# fifth of each start.

try:
    from nodeside import pair_topology, verdict
except ImportError:  # on a node: verdict.py and pair_topology.py sit next to this file
    import pair_topology
    import verdict

# step -> (figure compared, thresholds key, "min" floor or "max" ceiling)
FIGURES = {
    "single": ("busbw", None, "min"),
    "all_reduce": ("algbw", "all_reduce_min_algbw", "min"),
    "alltoall": ("algbw", "alltoall_min_algbw", "min"),
    # the container run must match the host (a gap is the image's NCCL/plugin, not the
    # fabric), so the same floors apply
    "torch_all_reduce": ("algbw", "all_reduce_min_algbw", "min"),
    "torch_all_to_all": ("algbw", "alltoall_min_algbw", "min"),
    "pingpong": ("latency_us", "pingpong_max_latency_us", "max"),
}
PAIR_STEPS = ("all_reduce", "alltoall", "torch_all_reduce", "torch_all_to_all", "pingpong")
# On an instance type with GPUs these must have run at least once: a gate whose GPU and
# EFA checks were all skipped (no nccl-tests, no fi_pingpong, one idle node) has not
# shown anything, so it cannot say GO. The container check stays optional: an empty
# container_image skips it on purpose.
REQUIRED_ON_GPUS = ("single", "all_reduce", "alltoall", "pingpong")
REASON_PREFIX = "gpu-cluster validation: "
# A join run (nodes that registered into a running cluster, lib/join-gate.sh) names
# itself in the drain reason, so `sinfo -R` tells it from the first-boot gate.
JOIN_REASON_PREFIX = "gpu-cluster join gate: "


# config.json, run.json, report.json, baseline.json and the features file are small;
# a device or a runaway file in their place is refused, not read without end.
MAX_JSON_BYTES = 16 << 20
# What every command but `settings` reads from config.json (userdata/validation_files.py).
REQUIRED_CONFIG = {"fsx_root": str, "instance_type": str, "cluster_name": str, "thresholds": dict}


def load_json(path, default=None):
    text, _, _ = verdict.read_log(path, MAX_JSON_BYTES)
    try:
        return default if text is None else json.loads(text)
    except ValueError:
        return default


class InputProblem(Exception):
    """One line for stderr and the exit code it means (verdict.EXIT_*)."""

    def __init__(self, line, code):
        super().__init__(line)
        self.code = code


def read_config(path, cmd):
    """config.json as a mapping holding what `cmd` reads; InputProblem otherwise."""
    text, why, code = verdict.read_log(path, MAX_JSON_BYTES)
    if text is None:
        raise InputProblem(f"--config {path}: {why.replace('log', 'file')}", code)
    try:
        config = json.loads(text)
    except ValueError as e:
        raise InputProblem(f"--config {path}: not JSON ({e})", verdict.EXIT_USAGE) from None
    if not isinstance(config, dict):
        raise InputProblem(f"--config {path}: a JSON {type(config).__name__}, not an object", verdict.EXIT_USAGE)
    if cmd != "settings":
        bad = [k for k, kind in REQUIRED_CONFIG.items() if not isinstance(config.get(k), kind)]
        if bad:
            raise InputProblem(
                f"--config {path}: {', '.join(bad)} missing or of the wrong type (a partial config.json?)",
                verdict.EXIT_USAGE,
            )
    return config


# Commands whose --run directory must exist (start creates it).
RUN_EXISTS = ("check", "skip", "build")


def check_run(a):
    if a.cmd not in RUN_EXISTS and a.cmd != "start":
        return
    if not a.run:
        raise InputProblem(f"{a.cmd}: --run DIR is required", verdict.EXIT_USAGE)
    if a.cmd == "start":
        parent = os.path.dirname(os.path.abspath(a.run))
        if not os.path.isdir(parent):
            raise InputProblem(f"--run {a.run}: {parent} is not a directory", verdict.EXIT_USAGE)
        return
    if not os.path.exists(a.run):
        raise InputProblem(f"--run {a.run}: no such run directory (start the run first)", verdict.EXIT_UNREACHABLE)
    if not os.path.isdir(a.run):
        raise InputProblem(f"--run {a.run}: not a directory", verdict.EXIT_USAGE)


def write_json(path, data):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def usable_baseline(config, baseline):
    """The baseline applies only to the same instance type (figures differ per type)."""
    if baseline and baseline.get("instance_type") == config["instance_type"]:
        return baseline.get("figures", {})
    return {}


def limit_for(step, config, baseline_figures):
    """(limit, source) for a step: catalog threshold, tightened by the baseline."""
    figure, key, kind = FIGURES[step]
    th = config["thresholds"]
    limit = th.get(key) if key else None
    source = "catalog" if limit is not None else None
    base = baseline_figures.get(f"{step}.{figure}")
    margin = float(config.get("baseline_margin", 0.1))
    if base is not None:
        b = base * (1 - margin) if kind == "min" else base * (1 + margin)
        if limit is None or (b > limit if kind == "min" else b < limit):
            limit, source = round(b, 2), f"baseline {base} -/+ {margin:.0%}"
    if limit is not None and not limit > 0:
        # a zero figure (an instance type without EFA, a zero baseline) bounds nothing;
        # verdict.evaluate refuses floors that are not positive
        limit, source = None, None
    return limit, source


def check_step(config, baseline_figures, step, text):
    """Verdict dict for one step's log (pmix: did a two-task PMIx step run)."""
    if step == "container":
        # one line "container-ok <host>" per node from inside the image (Pyxis + Enroot)
        hosts = sorted(set(re.findall(r"^container-ok (\S+)$", text, re.M)))
        want = int(re.search(r"^# nodes=(\d+)", text, re.M).group(1)) if re.search(r"^# nodes=", text, re.M) else 1
        ok = len(hosts) >= want
        return {
            "tool": "srun --container-image",
            "verdict": "GO" if ok else "NO-GO",
            "reasons": [] if ok else [f"the container ran on {len(hosts)} of {want} node(s)"],
            "notes": hosts,
        }
    if step == "pmix":
        # a real `srun --mpi=pmix -n2 true`: GO when it exited 0 (run_step appends the exit
        # status line only on failure); the reason is Slurm's own first error line
        failed = re.search(r"^gate: command exit status", text, re.M) is not None
        errors = [ln.strip() for ln in text.splitlines() if re.search(r"error", ln, re.I)]
        return {
            "tool": "srun --mpi=pmix -n2 true",
            "verdict": "NO-GO" if failed else "GO",
            "reasons": [f"srun --mpi=pmix -n2 true failed: {(errors or ['no error output'])[0]}"] if failed else [],
            "notes": errors[:5],
        }
    th = config["thresholds"]
    limit, source = limit_for(step, config, baseline_figures)
    figure, _, kind = FIGURES[step]
    kw = {}
    if step != "single":  # one node rides NVLink only: no transport or NIC expectation
        kw = {"expect_transport": th["expect_transport"], "expect_nics": th["expect_nics"]}
    if limit is not None:
        kw[{"algbw": "min_algbw", "busbw": "min_busbw", "latency_us": "max_latency_us"}[figure]] = limit
    r = verdict.evaluate(text, **kw)
    r.update(figure=figure, value=r.get(figure), limit=limit, limit_kind=kind, limit_source=source)
    return r


def _blocks(nodes, features):
    """{node: capacity block} from the `block-<name>` node feature ("default" without)."""
    out = {}
    for n in nodes:
        feats = features.get(n, [])
        out[n] = next((f[len("block-") :] for f in feats if f.startswith("block-")), "default")
    return out


def pairs(nodes, features, paths=None):
    """Node pairs "(a, b, kind, level)".

    Without the network topology: a ring inside each capacity block (every node meets
    two different partners, so a single bad node fails both of its pairs and is named).
    With it (`paths`, the controller's record): the covered nodes are paired by
    pair_topology.topology_pairs (a same-leaf pair in every leaf, a pair across every
    network node with several children), the others in the ring of their block. Either
    way one pair across each neighbouring block boundary, reported separately (the network
    spine above the nodes differs between blocks [TOPO]). `kind` is within:<block> or
    across:<a>/<b>; `level` the pair's topology level, None when not known."""
    block_of = _blocks(nodes, features)
    paths = {n: p for n, p in (paths or {}).items() if n in block_of}
    raw = pair_topology.topology_pairs(paths)
    blocks = {}
    for n in nodes:
        if n not in paths:
            blocks.setdefault(block_of[n], []).append(n)
    for b in sorted(blocks):
        raw.extend(pair_topology._ring(blocks[b]))
    firsts = {}
    for n in nodes:
        firsts.setdefault(block_of[n], n)
    names = sorted(firsts)
    boundary = [(firsts[a], firsts[b]) for a, b in itertools.pairwise(names)]
    out, seen = [], set()
    for a, b in raw + [p for p in boundary if p not in raw and p[::-1] not in raw]:
        if (a, b) in seen or (b, a) in seen:
            continue
        seen.add((a, b))
        ka, kb = block_of[a], block_of[b]
        kind = f"within:{ka}" if ka == kb else f"across:{min(ka, kb)}/{max(ka, kb)}"
        lvl = pair_topology.level(paths[a], paths[b]) if a in paths and b in paths else None
        out.append((a, b, kind, lvl))
    return out


def join_pairs(nodes, newcomers, partner):
    """Pairs of a join run: each newcomer against the one healthy partner already in
    service (a failing pair then names the newcomer), or, with no partner (every node is
    new, e.g. the next block joining a dedicated controller), the ring of `pairs`."""
    if partner and partner in nodes:
        return [(n, partner, "join", None) for n in nodes if n in newcomers]
    return pairs([n for n in nodes if n in newcomers], {})


def join_outcome(records, newcomers, gpus):
    """{newcomer: reason} for every newcomer that did not pass; the reason names the
    check and its log. A NO-GO record that covers a newcomer fails it (the partner is
    known good); on a GPU type a newcomer also needs its own single-node GO, and a
    pair GO when a pair was possible."""
    failed = {}
    for r in records:
        if r["verdict"] != "NO-GO":
            continue
        for n in r["nodes"]:
            if n in newcomers and n not in failed:
                where = "+".join(r["nodes"])
                # the log goes last and whole: Slurm's reason field is short
                failed[n] = f"{r['step']} NO-GO on {where}: {_first(r)[:60]}; log {r.get('log') or 'report.json'}"
    if gpus:
        for n in newcomers:
            mine = {r["step"] for r in records if n in r["nodes"] and r["verdict"] == "GO"}
            if n not in failed and "single" not in mine:
                failed[n] = "single never ran on this node (see report.json)"
            elif n not in failed and len(records) and not mine & set(PAIR_STEPS) and _pair_possible(records):
                failed[n] = "no pair test passed with this node (see report.json)"
    return failed


def _pair_possible(records):
    return any(r["step"] in PAIR_STEPS and r["verdict"] != "SKIPPED" for r in records)


def parse_features(text):
    feats = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            feats[parts[0]] = parts[1].split(",")
        elif parts:
            feats.setdefault(parts[0], [])
    return feats


def blame(records):
    """Nodes to drain, with the reason: failed single-node checks, and nodes whose
    every within-block pair failed while some other pair passed (otherwise the
    failure is cluster-wide configuration, not a node)."""
    bad = {}
    for r in records:
        if r["step"] == "single" and r["verdict"] == "NO-GO":
            bad.setdefault(r["nodes"][0], f"single-node all_reduce NO-GO: {_first(r)}")
    pair_ok = {}
    why = {}
    for r in records:
        if r["step"] in PAIR_STEPS and r["verdict"] != "SKIPPED" and r["kind"].startswith("within"):
            key = tuple(r["nodes"])
            pair_ok[key] = pair_ok.get(key, True) and r["verdict"] == "GO"
            if r["verdict"] == "NO-GO":
                why.setdefault(key, f"{r['step']} NO-GO with {{other}}: {_first(r)}")
    if any(pair_ok.values()):
        for node in sorted({n for key in pair_ok for n in key}):
            mine = [key for key in pair_ok if node in key]
            if mine and not any(pair_ok[k] for k in mine):
                other = ",".join(n for n in mine[0] if n != node)
                bad.setdefault(node, why[mine[0]].replace("{other}", other))
    return bad


def _first(r):
    return r["reasons"][0] if r.get("reasons") else "no reason recorded"


def drain(nodes_reasons, runner=None, prefix=REASON_PREFIX):
    """Drain each node with the reason in Slurm's reason field (`runner`: subprocess.run)."""
    if runner is None:
        import subprocess

        runner = subprocess.run
    done = {}
    for node, why in sorted(nodes_reasons.items()):
        reason = (prefix + why)[:250]
        res = runner(
            ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"],
            capture_output=True,
            text=True,
            check=False,
        )
        done[node] = {"reason": reason, "rc": res.returncode, "stderr": (res.stderr or "").strip()}
    return done


def figures_of(records):
    """Median figure per step over GO records: what the baseline stores."""
    vals = {}
    for r in records:
        if r.get("retest_of"):
            continue  # a re-test measures a suspect node, not the cluster
        if r["verdict"] == "GO" and r.get("value") is not None and r["step"] in FIGURES:
            vals.setdefault(f"{r['step']}.{r['figure']}", []).append(r["value"])
    import statistics

    return {k: round(statistics.median(v), 2) for k, v in sorted(vals.items())}


def groups(records):
    """Pair figures per pair kind (within:<block> / across:<a>/<b>), reported separately:
    the network segment differs between blocks, so their figures may differ."""
    return pair_topology.figures_by(records, lambda r: (r.get("kind") or None) if r["step"] in PAIR_STEPS else None)


def topology_report(config, run_dir, records):
    """Figures per topology level, the levels flagged against the same-leaf median
    (`level_margin`), the outlier pairs, and what their re-tests blamed or cleared;
    None when no pair had a level (no topology recorded)."""
    figures = pair_topology.level_figures(records)
    if not figures:
        return None
    kinds = {step: FIGURES[step][2] for step in FIGURES}
    blamed, notes = pair_topology.retest_blame(records, topology_paths(config, run_dir))
    return {
        "levels": figures,
        "level_margin": float(config.get("level_margin", 0.1)),
        "flags": pair_topology.level_flags(figures, float(config.get("level_margin", 0.1)), kinds),
        "outliers": {f"{a}+{b} {step}": why for (a, b, step), why in sorted(pair_topology.outliers(records).items())},
        "blamed": blamed,
        "notes": notes,
    }


def _read_records(run_dir):
    try:
        with open(os.path.join(run_dir, "steps.jsonl"), encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except OSError:
        return []


def _verdict(config, records):
    """(verdict, reasons) of a run: NO-GO on any NO-GO step, on no step at all, or when
    a step a GPU cluster needs never ran."""
    nogo = [r for r in records if r["verdict"] == "NO-GO"]
    ran = {r["step"] for r in records if r["verdict"] != "SKIPPED"}
    never_ran = [s for s in REQUIRED_ON_GPUS if s not in ran] if int(config.get("gpus", 0)) > 0 and records else []
    if not records:
        return "NO-GO", ["no step recorded: the job died before its first step"]
    if never_ran and not nogo:
        return "NO-GO", [
            f"{step} never ran (every attempt was skipped, see above): a {config['instance_type']} "
            "cluster is not validated until it does"
            for step in never_ran
        ]
    return ("NO-GO" if nogo or never_ran else "GO"), None


def _record_baseline(config, report, records, root):
    """Compare with the stored baseline; the first GO run with figures becomes it."""
    base_path = os.path.join(root, "baseline.json")
    baseline = load_json(base_path)
    report["baseline"] = {
        "path": base_path,
        "run_id": (baseline or {}).get("run_id"),
        "applied": bool(usable_baseline(config, baseline)),
    }
    figs = figures_of(records)
    if report["verdict"] == "GO" and figs and baseline is None:
        write_json(
            base_path,
            {
                "run_id": report["run_id"],
                "instance_type": config["instance_type"],
                "cluster": config["cluster_name"],
                "created": report["finished"],
                "figures": figs,
            },
        )
        report["baseline"].update(run_id=report["run_id"], recorded=True)


def build(config, run_dir, root, do_drain=False, runner=None, now=None):
    meta = load_json(os.path.join(run_dir, "run.json"), {})
    records = _read_records(run_dir)
    join = "newcomers" in meta
    if join:
        # a join run judges only its newcomers; the partner was already in service
        bad = join_outcome(records, meta["newcomers"], int(config.get("gpus", 0)))
        verdict_ = "NO-GO" if bad or not records else "GO"
        reasons = None if records else ["no step recorded: the job died before its first step"]
    else:
        bad = blame(records)
        verdict_, reasons = _verdict(config, records)
    topo = None if join else topology_report(config, run_dir, records)
    for node, why in (topo or {}).get("blamed", {}).items():
        bad.setdefault(node, why)
    report = {
        "run_id": meta.get("run_id", os.path.basename(run_dir.rstrip("/"))),
        "job_id": meta.get("job_id"),
        "cluster": config["cluster_name"],
        "instance_type": config["instance_type"],
        "nodes": meta.get("nodes", []),
        "started": meta.get("started"),
        "finished": now or _now(),
        "thresholds": config["thresholds"],
        "baseline_margin": config.get("baseline_margin"),
        "steps": records,
        "blamed_nodes": bad,
        "pair_groups": groups(records),
        "skipped": [f"{r['step']} {'+'.join(r['nodes'])}: {_first(r)}" for r in records if r["verdict"] == "SKIPPED"],
        "verdict": verdict_,
    }
    if reasons is not None:
        report["reasons"] = reasons
    if topo:
        report["topology"] = topo
    if join:
        # the baseline comes from full runs only; `status` keeps showing the cluster's gate
        report["join"] = {"newcomers": meta["newcomers"], "partner": meta.get("partner") or None}
        report["baseline"] = {}
    else:
        _record_baseline(config, report, records, root)
    prefix = JOIN_REASON_PREFIX if join else REASON_PREFIX
    report["drained"] = drain(bad, runner, prefix) if do_drain and bad else {}
    write_json(os.path.join(run_dir, "report.json"), report)
    text = summary(report)
    with open(os.path.join(run_dir, "summary.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(root, "latest-join" if join else "latest"), "w", encoding="utf-8") as f:
        f.write(report["run_id"] + "\n")
    return report


def _fmt(r):
    if r["verdict"] == "SKIPPED" or r.get("value") is None:
        return ""
    unit = "us" if r["figure"] == "latency_us" else "GB/s"
    lim = ""
    if r.get("limit") is not None:
        lim = f" ({r['limit_kind']} {r['limit']} {unit}, {r['limit_source']})"
    return f"{r['figure'].replace('_us', '')} {r['value']} {unit}{lim}"


def _topology_lines(topo):
    """The per-level figures (leaf first), flagged levels, outlier pairs, re-test notes."""
    if not topo:
        return []
    out = []
    for lvl, steps in topo["levels"].items():
        figs = ", ".join(
            f"{step} median {g['median']} ({g['GO']} GO, {g['NO-GO']} NO-GO)" for step, g in sorted(steps.items())
        )
        out.append(f"  level {lvl}: {figs}")
    out.extend(f"  FLAG {line}" for line in topo["flags"])
    out.extend(f"  outlier {pair}: {why}" for pair, why in topo["outliers"].items())
    out.extend(f"  re-test: {note}" for note in topo["notes"])
    return out


def summary(report):
    out = [
        f"gpu-cluster validation {report['run_id']}: {report['verdict']}",
        f"cluster {report['cluster']}, {report['instance_type']}, {len(report['nodes'])} node(s): "
        f"{','.join(report['nodes'])}",
    ]
    for r in report["steps"]:
        retest = f"re-test of {r['retest_of']}" if r.get("retest_of") else ""
        where = " ".join(x for x in (r.get("kind"), r.get("level"), retest) if x)
        line = f"  {r['verdict']:7} {r['step']:17} {'+'.join(r['nodes']):28} {where:16} {_fmt(r)}"
        out.append(line.rstrip())
        if r["verdict"] != "GO":
            out.extend(f"           - {why}" for why in r.get("reasons", []))
        out.extend(f"           note: {n}" for n in r.get("notes", []))
    for why in report.get("reasons", []):
        out.append(f"  NO-GO: {why}")
    for kind, steps in sorted(report.get("pair_groups", {}).items()):
        out.append(
            f"  pairs {kind}: "
            + ", ".join(
                f"{step} median {g['median']} ({g['GO']} GO, {g['NO-GO']} NO-GO)" for step, g in sorted(steps.items())
            )
        )
    out.extend(_topology_lines(report.get("topology")))
    for node, why in sorted(report["blamed_nodes"].items()):
        d = report["drained"].get(node)
        state = "" if d is None else (" -> drained" if d["rc"] == 0 else f" -> drain FAILED: {d['stderr']}")
        out.append(f"  bad node {node}: {why}{state}")
    b = report["baseline"]
    if report.get("join"):
        j = report["join"]
        out.append(f"  join gate: newcomers {','.join(j['newcomers'])}, partner {j['partner'] or 'none (all new)'}")
    if b.get("recorded"):
        out.append(f"  baseline recorded from this run: {b['path']}")
    elif b.get("run_id"):
        out.append(
            f"  compared with baseline {b['run_id']}" + ("" if b["applied"] else " (other instance type: not applied)")
        )
    return "\n".join(out) + "\n"


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _append(run_dir, record):
    with open(os.path.join(run_dir, "steps.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


def _parser():
    p = argparse.ArgumentParser(
        prog="validation_report.py",
        description="first-boot validation report: step verdicts, node pairs, report, baseline, drains",
        epilog="example:\n  gpu-cluster-validation status   (runs: validation_report.py --config CONFIG status)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"validation_report.py (gpu-cluster) {verdict.version()}")
    p.add_argument(
        "--config",
        default="/opt/gpu-cluster/validation/config.json",
        help="the node's validation config (default: %(default)s)",
    )
    p.add_argument("--run", help="run directory (start creates it; check, skip and build need it)")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    s.add_argument("--nodes", required=True)
    s.add_argument("--job-id", default="")
    s.add_argument("--newcomers", help="join run: the nodes it gates (lib/join-gate.sh)")
    s.add_argument("--partner", default="", help="join run: the healthy node already in service")
    s = sub.add_parser("plan")
    s.add_argument("--nodes", required=True)
    s.add_argument("--features", required=True, help="file with `sinfo -h -N -o '%%N %%f'` output")
    for name in ("check", "skip"):
        s = sub.add_parser(name)
        s.add_argument("--step", required=True, choices=("pmix", "container") + tuple(FIGURES))
        s.add_argument("--nodes", required=True)
        s.add_argument("--kind", default="")
        s.add_argument("--level", default="", help="the pair's topology level (plan's LEVEL)")
        s.add_argument("--retest-of", default="", help="a re-test: the suspect pair a+b it measures again")
        s.add_argument("--log" if name == "check" else "--reason", required=True)
    sub.add_parser("retest-plan", help="pairs re-testing the nodes of outlier and NO-GO pairs")
    s = sub.add_parser("build")
    s.add_argument("--drain", action="store_true")
    s = sub.add_parser("joined", help="the join gate's outcome per newcomer, for lib/join-gate.sh")
    s.add_argument("--report", required=True)
    s.add_argument("--newcomers", required=True)
    s.add_argument("--fallback", required=True, help="the reason when the report is missing")
    sub.add_parser("status").add_argument("--json", action="store_true")
    sub.add_parser("settings").add_argument("keys", nargs="+", metavar="KEY")
    return p


def settings(config, keys):
    """config.json values for the shell, one line each (`a.b` looks inside objects).
    Every key is checked before anything is printed, so a reader never gets a partial set."""
    out = []
    for key in keys:
        value = config
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                raise KeyError(key)
            value = value[part]
        if isinstance(value, (dict, list)):
            raise KeyError(key)
        out.append(str(value))
    return out


def _cmd_start(a, config, root, nodes):
    os.makedirs(a.run, exist_ok=True)
    meta = {"run_id": os.path.basename(a.run.rstrip("/")), "job_id": a.job_id, "nodes": nodes, "started": _now()}
    if a.newcomers:
        meta.update(newcomers=[n for n in a.newcomers.split(",") if n], partner=a.partner)
    write_json(os.path.join(a.run, "run.json"), meta)
    return 0


def topology_paths(config, run_dir=None):
    """{node: network nodes} from the run's snapshot of the controller's topology record
    (taken by `plan`), else the record itself; {} when there is none."""
    snap = load_json(os.path.join(run_dir, "topology.json")) if run_dir else None
    record = snap if snap is not None else load_json(os.path.join(config["fsx_root"], "topology", "nodes.json"))
    return pair_topology.paths_of(record)


def _cmd_plan(a, config, root, nodes):
    text, why, code = verdict.read_log(a.features, MAX_JSON_BYTES)
    if text is None:
        raise InputProblem(f"--features {a.features}: {why.replace('log', 'file')}", code)
    feats = parse_features(text)
    meta = load_json(os.path.join(a.run, "run.json"), {}) if a.run else {}
    if "newcomers" in meta:
        plan = join_pairs(nodes, meta["newcomers"], meta.get("partner"))
    else:
        record = load_json(os.path.join(config["fsx_root"], "topology", "nodes.json"))
        if a.run and record is not None:
            write_json(os.path.join(a.run, "topology.json"), record)  # what this run was planned with
        plan = pairs(nodes, feats, pair_topology.paths_of(record))
    for x, y, kind, lvl in plan:
        print(x, y, kind, lvl or "-")
    return 0


def _cmd_retest_plan(a, config, root, nodes):
    """Each node of an outlier or NO-GO bandwidth pair with a partner that measured well."""
    records = _read_records(a.run)
    paths = topology_paths(config, a.run)
    kinds = {tuple(r["nodes"]): r.get("kind") or "within:default" for r in records if len(r["nodes"]) == 2}
    for node, partner, suspect in pair_topology.retest_plan(records, paths):
        x, y = suspect.split("+")
        lvl = pair_topology.level(paths[node], paths[partner]) if node in paths and partner in paths else "-"
        print(node, partner, kinds.get((x, y), "within:default"), lvl, suspect)
    return 0


def _placed(a, record):
    """The record with its topology level and, for a re-test, the pair it re-tests."""
    if a.level and a.level != "-":
        record["level"] = a.level
    if a.retest_of:
        record["retest_of"] = a.retest_of
    return record


def _cmd_skip(a, config, root, nodes):
    _append(
        a.run,
        _placed(
            a,
            {"step": a.step, "nodes": nodes, "kind": a.kind, "verdict": "SKIPPED", "reasons": [a.reason], "notes": []},
        ),
    )
    print(f"SKIPPED {a.step} {'+'.join(nodes)}: {a.reason}")
    return 0


def _cmd_check(a, config, root, nodes):
    # An unreadable log is this step's NO-GO (recorded as such), not the program's error.
    text, why, _ = verdict.read_log(a.log)
    if text is None:
        text = why
    base = usable_baseline(config, load_json(os.path.join(root, "baseline.json")))
    r = check_step(config, base, a.step, text)
    r.update(step=a.step, nodes=nodes, kind=a.kind, log=a.log)
    _append(a.run, _placed(a, r))
    print(f"{r['verdict']} {a.step} {'+'.join(nodes)} {_fmt(r)}".rstrip())
    for why in r["reasons"]:
        print(f"  - {why}")
    return 0 if r["verdict"] == "GO" else 1


def _cmd_build(a, config, root, nodes):
    report = build(config, a.run, root, a.drain)
    sys.stdout.write(summary(report))
    return 0 if report["verdict"] == "GO" else 1


def health_records(fsx_root):
    """The health program's last run per node ({fsx_root}/health/<node>.json): state, time,
    reason and failed checks, so the gate's status also says how each node is now."""
    out = {}
    d = os.path.join(fsx_root, "health")
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if not name.endswith(".json"):
            continue
        r = load_json(os.path.join(d, name))
        if not isinstance(r, dict):
            out[name[:-5]] = {"state": "unreadable", "time": "", "reason": "", "failed": []}
            continue
        failed = [c.get("detail", "") for c in r.get("checks", []) if isinstance(c, dict) and c.get("status") == "fail"]
        out[name[:-5]] = {
            "state": r.get("state"),
            "time": r.get("time"),
            "reason": r.get("reason", ""),
            "failed": failed,
        }
    return out


def health_summary(records):
    out = [f"node health ({len(records)} record(s)):"] if records else ["node health: no record yet"]
    for node, r in sorted(records.items()):
        out.append(f"  {node}: {r['state']} ({r['time'] or '?'})" + (f": {r['reason']}" if r["reason"] else ""))
    return "\n".join(out) + "\n"


def _cmd_status(a, config, root, nodes):
    health = health_records(config["fsx_root"])
    try:
        with open(os.path.join(root, "latest"), encoding="utf-8") as f:
            run_id = f.read().strip()
    except OSError:
        print(f"no validation run recorded under {root}")
        sys.stdout.write(health_summary(health))
        return verdict.EXIT_UNREACHABLE
    report = load_json(os.path.join(root, run_id, "report.json"))
    if not isinstance(report, dict) or "verdict" not in report:
        print(f"run {run_id}: report missing or unreadable under {root}")
        sys.stdout.write(health_summary(health))
        return verdict.EXIT_UNREACHABLE
    if a.json:
        sys.stdout.write(json.dumps({**report, "health": health}, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(summary(report) + health_summary(health))
    return 0 if report["verdict"] == "GO" else 1


def _cmd_settings(a, config, root, nodes):
    try:
        lines = settings(config, a.keys)
    except KeyError as e:
        print(f"{a.config} has no {e.args[0]}", file=sys.stderr)
        return verdict.EXIT_USAGE
    print("\n".join(lines))
    return 0


def _cmd_joined(a, config, root, nodes):
    """One line "NODE GO" or "NODE <reason>" per newcomer: a newcomer the report does
    not judge (no report: the job died or was cancelled) gets the fallback reason."""
    report = load_json(a.report) or {}
    judged = report.get("join", {}).get("newcomers", [])
    failed = report.get("blamed_nodes", {})
    for n in [x for x in a.newcomers.split(",") if x]:
        if n not in judged:
            print(n, a.fallback)
        else:
            print(n, failed.get(n, "GO"))
    return 0


COMMANDS = {
    "joined": _cmd_joined,
    "start": _cmd_start,
    "plan": _cmd_plan,
    "retest-plan": _cmd_retest_plan,
    "skip": _cmd_skip,
    "check": _cmd_check,
    "build": _cmd_build,
    "status": _cmd_status,
    "settings": _cmd_settings,
}


def main(argv=None):
    a = _parser().parse_args(argv)

    def body():
        try:
            config = read_config(a.config, a.cmd)
            check_run(a)
            root = os.path.join(config.get("fsx_root", ""), "validation")
            nodes = [n for n in getattr(a, "nodes", "").split(",") if n]
            return COMMANDS[a.cmd](a, config, root, nodes)
        except InputProblem as e:
            print(f"validation_report.py {a.cmd}: {e}", file=sys.stderr)
            return e.code

    return verdict.guarded("validation_report.py", body)


if __name__ == "__main__":
    sys.exit(main())
