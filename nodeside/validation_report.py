"""Validation run bookkeeping: step verdicts, node pairs, report, baseline, drains.

Stdlib only; ships as /opt/gpu-cluster/lib/validation_report.py next to verdict.py.
gate.sh stays thin and calls, per run directory <fsx_root>/validation/<run-id>/:

  start --nodes a,b --job-id J [--newcomers a --partner b]
                                    run.json (node list; a join run names its newcomers
                                    and the healthy partner already in service)
  plan  --nodes a,b --features F    node pairs "A B KIND" (F: `sinfo -h -N -o '%N %f'`)
  check --step S --nodes a,b [--kind K] --log L   verdict of one step, exit 0 GO / 1 NO-GO
  skip  --step S --nodes a,b [--kind K] --reason R
  build [--drain]                   report.json + summary.txt, baseline, drains
  status                            overall verdict of the latest run (controller)
  settings KEY...                   config.json values for gate.sh, one per line
"""

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import time

try:
    from nodeside import verdict
except ImportError:  # on a node: verdict.py sits next to this file
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


def load_json(path, default=None):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


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


def pairs(nodes, features):
    """Node pairs: a ring inside each capacity block (every node meets two different
    partners, so a single bad node fails both of its pairs and is named), plus one
    pair across each neighbouring block boundary, reported separately (the network
    spine above the nodes differs between blocks [TOPO])."""
    blocks = {}
    for n in nodes:
        feats = features.get(n, [])
        b = next((f[len("block-") :] for f in feats if f.startswith("block-")), "default")
        blocks.setdefault(b, []).append(n)
    out = []
    for b in sorted(blocks):
        members = blocks[b]
        if len(members) == 2:
            out.append((members[0], members[1], f"within:{b}"))
        elif len(members) > 2:
            out.extend((members[i], members[(i + 1) % len(members)], f"within:{b}") for i in range(len(members)))
    names = sorted(blocks)
    for a, b in itertools.pairwise(names):
        out.append((blocks[a][0], blocks[b][0], f"across:{a}/{b}"))
    return out


def join_pairs(nodes, newcomers, partner):
    """Pairs of a join run: each newcomer against the one healthy partner already in
    service (a failing pair then names the newcomer), or, with no partner (every node is
    new, e.g. the next block joining a dedicated controller), the ring of `pairs`."""
    if partner and partner in nodes:
        return [(n, partner, "join") for n in nodes if n in newcomers]
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


def drain(nodes_reasons, runner=subprocess.run, prefix=REASON_PREFIX):
    """Drain each node with the reason in Slurm's reason field."""
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
        if r["verdict"] == "GO" and r.get("value") is not None and r["step"] in FIGURES:
            vals.setdefault(f"{r['step']}.{r['figure']}", []).append(r["value"])
    return {k: round(statistics.median(v), 2) for k, v in sorted(vals.items())}


def groups(records):
    """Pair figures per pair kind (within:<block> / across:<a>/<b>), reported separately:
    the network segment differs between blocks, so their figures may differ."""
    out = {}
    for r in records:
        if r["step"] in PAIR_STEPS and r["verdict"] != "SKIPPED" and r.get("kind"):
            g = out.setdefault(r["kind"], {}).setdefault(r["step"], {"GO": 0, "NO-GO": 0, "values": []})
            g[r["verdict"]] += 1
            if r.get("value") is not None:
                g["values"].append(r["value"])
    for steps in out.values():
        for g in steps.values():
            vals = g.pop("values")
            g["median"] = round(statistics.median(vals), 2) if vals else None
    return out


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


def build(config, run_dir, root, do_drain=False, runner=subprocess.run, now=None):
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


def summary(report):
    out = [
        f"gpu-cluster validation {report['run_id']}: {report['verdict']}",
        f"cluster {report['cluster']}, {report['instance_type']}, {len(report['nodes'])} node(s): "
        f"{','.join(report['nodes'])}",
    ]
    for r in report["steps"]:
        line = f"  {r['verdict']:7} {r['step']:17} {'+'.join(r['nodes']):28} {r.get('kind') or '':16} {_fmt(r)}"
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
    p = argparse.ArgumentParser(description="first-boot validation report")
    p.add_argument("--config", default="/opt/gpu-cluster/validation/config.json")
    p.add_argument("--run", help="run directory")
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
        s.add_argument("--log" if name == "check" else "--reason", required=True)
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


def _cmd_plan(a, config, root, nodes):
    with open(a.features, encoding="utf-8") as f:
        feats = parse_features(f.read())
    meta = load_json(os.path.join(a.run, "run.json"), {}) if a.run else {}
    plan = join_pairs(nodes, meta["newcomers"], meta.get("partner")) if "newcomers" in meta else pairs(nodes, feats)
    for x, y, kind in plan:
        print(x, y, kind)
    return 0


def _cmd_skip(a, config, root, nodes):
    _append(
        a.run,
        {"step": a.step, "nodes": nodes, "kind": a.kind, "verdict": "SKIPPED", "reasons": [a.reason], "notes": []},
    )
    print(f"SKIPPED {a.step} {'+'.join(nodes)}: {a.reason}")
    return 0


def _cmd_check(a, config, root, nodes):
    try:
        with open(a.log, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        text = f"cannot read log: {e}"
    base = usable_baseline(config, load_json(os.path.join(root, "baseline.json")))
    r = check_step(config, base, a.step, text)
    r.update(step=a.step, nodes=nodes, kind=a.kind, log=a.log)
    _append(a.run, r)
    print(f"{r['verdict']} {a.step} {'+'.join(nodes)} {_fmt(r)}".rstrip())
    for why in r["reasons"]:
        print(f"  - {why}")
    return 0 if r["verdict"] == "GO" else 1


def _cmd_build(a, config, root, nodes):
    report = build(config, a.run, root, a.drain)
    sys.stdout.write(summary(report))
    return 0 if report["verdict"] == "GO" else 1


def _cmd_status(a, config, root, nodes):
    try:
        with open(os.path.join(root, "latest"), encoding="utf-8") as f:
            run_id = f.read().strip()
    except OSError:
        print(f"no validation run recorded under {root}")
        return 2
    report = load_json(os.path.join(root, run_id, "report.json"))
    if report is None:
        print(f"run {run_id}: report missing under {root}")
        return 2
    sys.stdout.write(json.dumps(report, indent=2, sort_keys=True) + "\n" if a.json else summary(report))
    return 0 if report["verdict"] == "GO" else 1


def _cmd_settings(a, config, root, nodes):
    try:
        lines = settings(config, a.keys)
    except KeyError as e:
        print(f"{a.config} has no {e.args[0]}", file=sys.stderr)
        return 2
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
    "skip": _cmd_skip,
    "check": _cmd_check,
    "build": _cmd_build,
    "status": _cmd_status,
    "settings": _cmd_settings,
}


def main(argv=None):
    a = _parser().parse_args(argv)
    config = load_json(a.config)
    if config is None:
        print(f"cannot read {a.config}", file=sys.stderr)
        return 2
    root = os.path.join(config["fsx_root"], "validation")
    nodes = [n for n in getattr(a, "nodes", "").split(",") if n]
    return COMMANDS[a.cmd](a, config, root, nodes)


if __name__ == "__main__":
    sys.exit(main())
