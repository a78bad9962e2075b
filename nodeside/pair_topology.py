"""The validation gate's view of EC2's network topology: which node pairs to measure, at
which level each pair sits, how each level's figures compare, and which pair stands out.

Stdlib only; ships as /opt/gpu-cluster/lib/pair_topology.py next to validation_report.py,
which calls it. The topology is the controller's record (FSX_ROOT/topology/nodes.json,
written by lib/topology.py): per Slurm node its EC2 network nodes, top layer first.

Level of a pair: the deepest network node the two share [TOPO]. `leaf` when they hang
off the same bottom node, `layer<k>` when the deepest shared node is in layer k (1 is the
top), `none` when they share no node at all. Nodes the topology does not cover have no
level; they are paired as before (a ring per capacity block).

Pairs (linear in the node count): a ring inside each leaf (every node of a leaf with 3
or more nodes meets two same-leaf partners), and for every network node with two or
more children a ring over its children, each child represented by one of its nodes, so
that every such network node has a pair across it; the tops, when there are several,
get a ring of `none` pairs. At most N + (number of network nodes) + (tops) pairs.

Outliers [HP-NCCL]: within one level, a pair whose figure is more than 5% below the
median of the other pairs of that level is named; its two nodes are measured again,
each with a partner from a pair that was not an outlier, and the node whose figure stays
low with the new partner is the bad one (the other is cleared).
"""

# AWS's HyperPod NCCL guidance flags a node pair whose all-reduce bus bandwidth at 16 GiB
# is more than 5% below the median of the others [HP-NCCL].
OUTLIER_FRACTION = 0.05
BANDWIDTH_STEPS = ("all_reduce", "alltoall")


def _median(values):
    # imported on use: the gate's report program loads this module at each of its ~25
    # starts and only the pair verdicts need a median
    import statistics

    return statistics.median(values)


def paths_of(record):
    """{node: [network node, ...]} for the covered nodes of a nodes.json document."""
    out = {}
    for node, info in ((record or {}).get("nodes") or {}).items():
        path = (info or {}).get("network_nodes")
        if isinstance(path, list) and path and all(isinstance(p, str) for p in path):
            out[node] = path
    return out


def level(path_a, path_b):
    """`leaf`, `layer<k>` or `none` for two network-node paths (top first)."""
    shared = 0
    for x, y in zip(path_a, path_b, strict=False):
        if x != y:
            break
        shared += 1
    if shared and shared == len(path_a) == len(path_b):
        return "leaf"
    return f"layer{shared}" if shared else "none"


def level_order(name):
    """Sort key: leaf first, then the deepest layers, `none` last."""
    if name == "leaf":
        return (0, 0)
    if name.startswith("layer") and name[len("layer") :].isdigit():
        return (1, -int(name[len("layer") :]))
    return (2, 0)


def _ring(members):
    if len(members) == 2:
        return [(members[0], members[1])]
    if len(members) > 2:
        return [(members[i], members[(i + 1) % len(members)]) for i in range(len(members))]
    return []


def _subtrees(paths):
    """{prefix tuple: sorted nodes under it} for every prefix of every path, and
    {prefix: sorted child prefixes}."""
    under, children = {}, {}
    for node, path in sorted(paths.items()):
        for i in range(1, len(path) + 1):
            prefix = tuple(path[:i])
            under.setdefault(prefix, []).append(node)
            if i > 1:
                children.setdefault(tuple(path[: i - 1]), set()).add(prefix)
    return under, {k: sorted(v) for k, v in children.items()}


def topology_pairs(paths):
    """[(a, b)] over the covered nodes: a ring per leaf, a ring over the children of every
    network node with two or more (deepest first), a ring over the tops when there are
    several. A child is represented by its node with the fewest pairs so far, so nodes
    meet partners in several places and no node carries the upper levels alone."""
    under, children = _subtrees(paths)
    degree = dict.fromkeys(paths, 0)
    out = []

    def add(a, b):
        degree[a] += 1
        degree[b] += 1
        out.append((a, b))

    def rep(prefix):
        return min(under[prefix], key=lambda n: (degree[n], n))

    for leaf in sorted({tuple(p) for p in paths.values()}):
        for a, b in _ring(under[leaf]):
            add(a, b)
    tops = sorted({(p[0],) for p in paths.values()})
    for parent in sorted(children, key=lambda k: (-len(k), k)) + ([None] if len(tops) > 1 else []):
        kids = tops if parent is None else children[parent]
        for x, y in _ring(kids):
            add(rep(x), rep(y))
    return out


def coverage_problems(paths, pairs):
    """What `topology_pairs` must guarantee, for tests: every leaf with two nodes or more
    has a same-leaf pair, every network node with two children or more has a pair across
    it, several tops have a pair across them. [] when all hold."""
    under, children = _subtrees(paths)
    problems = []
    covered = {tuple(_deepest_shared(paths[a], paths[b])) for a, b in pairs}
    for leaf in {tuple(p) for p in paths.values()}:
        if len(under[leaf]) >= 2 and leaf not in covered:
            problems.append(f"leaf {leaf[-1]} has no same-leaf pair")
    for parent, kids in children.items():
        if len(kids) >= 2 and parent not in covered:
            problems.append(f"network node {parent[-1]} has no pair across it")
    if len({p[0] for p in paths.values()}) > 1 and () not in covered:
        problems.append("the tops have no pair across them")
    return problems


def _deepest_shared(a, b):
    out = []
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        out.append(x)
    return out


def figures_by(records, key):
    """{key(r): {step: {"GO": n, "NO-GO": n, "median": x}}} over the first measurement of
    each pair (re-tests are reported on their own, skipped steps not at all); records whose
    key is None are left out."""
    out = {}
    for r in records:
        k = key(r)
        if k is None or r.get("retest_of") or r["verdict"] == "SKIPPED":
            continue
        g = out.setdefault(k, {}).setdefault(r["step"], {"GO": 0, "NO-GO": 0, "values": []})
        g[r["verdict"]] += 1
        if r.get("value") is not None:
            g["values"].append(r["value"])
    for steps in out.values():
        for g in steps.values():
            vals = g.pop("values")
            g["median"] = round(_median(vals), 2) if vals else None
    return out


def level_figures(records):
    """figures_by topology level, for the steps that measure a figure, nearest level first."""
    out = figures_by(records, lambda r: (r.get("level") or None) if r.get("figure") else None)
    return dict(sorted(out.items(), key=lambda kv: level_order(kv[0])))


def level_flags(figures, margin, kinds):
    """Lines for each level whose median is more than `margin` worse than the same-leaf
    median of the same step (below for bandwidth, above for latency: `kinds[step]`)."""
    flags = []
    leaf = figures.get("leaf", {})
    for name, steps in figures.items():
        if name == "leaf":
            continue
        for step, g in sorted(steps.items()):
            base, value = (leaf.get(step) or {}).get("median"), g.get("median")
            if not base or value is None:
                continue
            worse = (base - value) / base if kinds.get(step) == "min" else (value - base) / base
            if worse > margin:
                flags.append(
                    f"{step} pairs at level {name}: median {value} is {worse:.0%} "
                    f"{'below' if kinds.get(step) == 'min' else 'above'} the same-leaf median {base} "
                    f"(margin {margin:.0%})"
                )
    return flags


def outliers(records):
    """{(a, b, step): why} for first measurements more than OUTLIER_FRACTION below the
    median of the other pairs at their level (bandwidth steps; NO-GO pairs are the
    verdict's business and are re-tested anyway)."""
    by_level = {}
    for r in records:
        if r["step"] in BANDWIDTH_STEPS and r.get("level") and not r.get("retest_of") and r.get("value") is not None:
            by_level.setdefault((r["step"], r["level"]), []).append(r)
    out = {}
    for (step, lvl), rs in by_level.items():
        for r in rs:
            peers = [p["value"] for p in rs if p is not r]
            if not peers:
                continue
            median = _median(peers)
            if median > 0 and r["value"] < median * (1 - OUTLIER_FRACTION):
                out[(*r["nodes"], step)] = (
                    f"{step} {r['value']} is {1 - r['value'] / median:.0%} below the median {round(median, 2)} "
                    f"of the other {len(peers)} pair(s) at level {lvl}"
                )
    return out


def suspects(records):
    """Pairs to measure again: outliers and NO-GO bandwidth pairs, as (a, b)."""
    out = {(k[0], k[1]) for k in outliers(records)}
    for r in records:
        if r["step"] in BANDWIDTH_STEPS and r["verdict"] == "NO-GO" and not r.get("retest_of") and len(r["nodes"]) == 2:
            out.add(tuple(r["nodes"]))
    return sorted(out)


def _compared_well(records, bad_pairs):
    """Pairs that measured well: GO bandwidth first measurements, not suspect, with at
    least one other pair at their level to be compared with (a pair alone at its level
    clears nobody: it could be the slow one)."""
    firsts = [r for r in records if r["step"] in BANDWIDTH_STEPS and not r.get("retest_of")]
    counts = {}
    for r in firsts:
        counts[(r["step"], r.get("level"))] = counts.get((r["step"], r.get("level")), 0) + 1
    return [
        tuple(r["nodes"])
        for r in firsts
        if r["verdict"] == "GO" and tuple(r["nodes"]) not in bad_pairs and counts[(r["step"], r.get("level"))] > 1
    ]


def retest_plan(records, paths):
    """[(node, partner, suspect pair "a+b")]: each node of a suspect pair that no other
    pair has cleared (see _compared_well), once, with a partner from a pair that measured
    well and from no suspect pair, preferring one at the suspect pair's level; both nodes
    of a pair get the same partner, so the node is the only difference."""
    bad_pairs = suspects(records)
    cleared = {n for pair in _compared_well(records, set(bad_pairs)) for n in pair}
    partners = sorted(cleared - {n for pair in bad_pairs for n in pair})
    plan, done = [], set()
    for a, b in bad_pairs:
        want = level(paths[a], paths[b]) if a in paths and b in paths else None
        same = [g for g in partners if a in paths and g in paths and level(paths[a], paths[g]) == want]
        partner = (same or partners or [None])[0]
        for node in (a, b):
            if partner is not None and node not in cleared and node not in done:
                plan.append((node, partner, f"{a}+{b}"))
                done.add(node)
    return plan


def retest_blame(records, paths):
    """({node: why} to drain, [notes]) from the re-tests: a node whose re-test is NO-GO, or
    more than OUTLIER_FRACTION below the other measurements at its level that do not
    involve it, is bad; a suspect pair whose re-tested nodes all measure well is noted as
    not reproduced."""
    blamed, notes = {}, []
    retests = [r for r in records if r.get("retest_of") and r["step"] in BANDWIDTH_STEPS]
    for pair in sorted({r["retest_of"] for r in retests}):
        a, b = pair.split("+")
        low = {}
        for r in (x for x in retests if x["retest_of"] == pair):
            node = a if a in r["nodes"] else b
            why = _low(r, records, node)
            if why:
                low.setdefault(node, f"{why} with {next(n for n in r['nodes'] if n != node)} (re-test of {a}+{b})")
        for node, why in low.items():
            blamed.setdefault(node, why)
        if not low:
            notes.append(f"pair {a}+{b}: the re-tested node(s) measured well with other partners (not reproduced)")
    return blamed, notes


def _low(r, records, node):
    """Why the re-test `r` of `node` is low, or None."""
    if r["verdict"] == "NO-GO":
        return f"{r['step']} NO-GO: {(r.get('reasons') or ['no reason recorded'])[0]}"
    if r.get("value") is None:
        return None
    others = [
        x
        for x in records
        if x is not r and x["step"] == r["step"] and x.get("value") is not None and node not in x["nodes"]
    ]
    # its level's measurements without this node, else the step's at every level
    peers = [x["value"] for x in others if x.get("level") == r.get("level")] or [x["value"] for x in others]
    if not peers:
        return None
    median = _median(peers)
    if median > 0 and r["value"] < median * (1 - OUTLIER_FRACTION):
        return f"{r['step']} {r['value']} is {1 - r['value'] / median:.0%} below the median {round(median, 2)} of the others"
    return None
