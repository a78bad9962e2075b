"""The gate's topology-aware pair selection, level figures, outliers and re-tests
(nodeside/pair_topology.py), on generated EC2-shaped topologies of 2 to 1,024 nodes."""

from __future__ import annotations

import random

import pytest

from nodeside import pair_topology as pt
from nodeside import validation_report as vr


def generated(n: int, variant: int, layers: int = 3) -> dict[str, list[str]]:
    """n nodes under a random EC2-like tree: a few tops, fan-out 1-4 per layer, 1-16
    nodes per leaf (singletons and pairs included)."""
    rng = random.Random(variant)
    paths, nodes = {}, [f"ip-10-0-{i // 250}-{i % 250}" for i in range(n)]
    i = 0
    while i < n:
        path = [f"nn-t{rng.randrange(3)}"]
        for _ in range(1, layers):
            path.append(f"{path[-1]}-{rng.randrange(4)}")
        for _ in range(min(rng.choice((1, 2, 3, 8, 16)), n - i)):
            paths[nodes[i]] = path
            i += 1
    return paths


@pytest.mark.parametrize("n", [2, 3, 5, 16, 64, 257, 1024])
@pytest.mark.parametrize("layers", [3, 4])
def test_every_network_node_is_covered_with_pairs_linear_in_nodes(n, layers):
    for variant in range(3):
        paths = generated(n, variant, layers)
        pairs = pt.topology_pairs(paths)
        assert pt.coverage_problems(paths, pairs) == []
        switches = {p[: i + 1][-1] for p in paths.values() for i in range(len(p))}
        assert len(pairs) <= n + len(switches) + 3  # leaf rings + one ring per parent + tops
        assert len(pairs) <= (layers + 1) * n
        assert all(a != b and a in paths and b in paths for a, b in pairs)


def test_coverage_problems_sees_a_missing_pair():
    paths = {"a": ["t", "m", "l1"], "b": ["t", "m", "l1"], "c": ["t", "m", "l2"]}
    assert pt.coverage_problems(paths, [("a", "b")]) == ["network node m has no pair across it"]
    assert pt.coverage_problems(paths, [("a", "c")]) == ["leaf l1 has no same-leaf pair"]


def test_levels_of_pairs():
    assert pt.level(["t", "m", "l"], ["t", "m", "l"]) == "leaf"
    assert pt.level(["t", "m", "l"], ["t", "m", "x"]) == "layer2"
    assert pt.level(["t", "m", "l"], ["t", "x", "y"]) == "layer1"
    assert pt.level(["t", "m", "l"], ["u", "m", "l"]) == "none"
    assert sorted(["none", "layer1", "leaf", "layer2"], key=pt.level_order) == ["leaf", "layer2", "layer1", "none"]


def test_gate_plan_pairs_topology_then_flat_nodes_and_keeps_the_block_boundary_pair():
    feats = vr.parse_features("a block-x\nb block-x\nc block-x\nd block-y\ne block-y\n")
    paths = {"a": ["t", "m", "l1"], "b": ["t", "m", "l1"], "c": ["t", "m", "l2"], "d": ["t", "n", "l3"]}
    assert vr.pairs(["a", "b", "c", "d", "e"], feats, paths) == [
        ("a", "b", "within:x", "leaf"),
        ("a", "c", "within:x", "layer2"),
        ("b", "d", "across:x/y", "layer1"),
        # e is not covered: the ring of its block (alone), and the block boundary pair
        ("a", "d", "across:x/y", "layer1"),
    ]


def rec(nodes, value, step="all_reduce", level="leaf", verdict="GO", **extra):
    return {
        "step": step,
        "nodes": nodes,
        "verdict": verdict,
        "value": value,
        "figure": "algbw",
        "level": level,
        "kind": "within:a",
        "reasons": [] if verdict == "GO" else ["low"],
        **extra,
    }


def test_level_figures_and_a_level_flagged_against_the_same_leaf_median():
    records = [
        rec(["a", "b"], 370.0),
        rec(["c", "d"], 368.0),
        rec(["a", "c"], 360.0, level="layer2"),
        rec(["a", "e"], 300.0, level="none"),
        rec(["a", "e"], 20.0, step="pingpong", level="none"),
        rec(["a", "b"], 12.0, step="pingpong"),
        rec(["a", "c"], 200.0, level="layer2", retest_of="x+y"),  # re-tests are not level figures
    ]
    figs = pt.level_figures(records)
    assert list(figs) == ["leaf", "layer2", "none"]
    assert figs["leaf"]["all_reduce"] == {"GO": 2, "NO-GO": 0, "median": 369.0}
    assert figs["layer2"]["all_reduce"]["median"] == 360.0
    flags = pt.level_flags(figs, 0.10, {"all_reduce": "min", "pingpong": "max"})
    assert flags == [
        "all_reduce pairs at level none: median 300.0 is 19% below the same-leaf median 369.0 (margin 10%)",
        "pingpong pairs at level none: median 20.0 is 67% above the same-leaf median 12.0 (margin 10%)",
    ]


def test_an_outlier_is_more_than_5_percent_below_its_peers_median():
    records = [rec(["a", "b"], 370.0), rec(["b", "c"], 340.0), rec(["c", "d"], 345.0), rec(["d", "a"], 369.0)]
    # peers of b+c: 345, 369, 370 -> 369; 340 is 8% below. c+d: 340, 369, 370 -> 369; 345 is 7% below.
    assert set(pt.outliers(records)) == {("b", "c", "all_reduce"), ("c", "d", "all_reduce")}
    assert pt.outliers([rec(["a", "b"], 370.0), rec(["c", "d"], 355.0)]) == {}  # 4% is noise


def test_the_one_slow_node_is_re_tested_and_blamed_not_its_partners():
    paths = {n: ["t", "m", "l"] for n in "abcd"}
    records = [rec(["a", "b"], 370.0), rec(["b", "c"], 340.0), rec(["c", "d"], 345.0), rec(["d", "a"], 369.0)]
    # b and d have a pair that measured well; c has none: only c is measured again, with a
    assert pt.retest_plan(records, paths) == [("c", "a", "b+c")]
    records.append(rec(["c", "a"], 338.0, retest_of="b+c"))
    blamed, notes = pt.retest_blame(records, paths)
    assert list(blamed) == ["c"] and "below the median" in blamed["c"] and "with a (re-test of b+c)" in blamed["c"]
    assert notes == []


def test_a_pair_whose_nodes_measure_well_again_is_noted_not_drained():
    paths = {n: ["t", "m", f"l{n}"] for n in "abcd"}
    records = [
        rec(["a", "b"], 300.0, level="layer2"),
        rec(["c", "d"], 370.0, level="layer2"),
        rec(["e", "f"], 369.0, level="layer2"),
    ]
    paths.update({"e": ["t", "m", "le"], "f": ["t", "m", "lf"]})
    plan = pt.retest_plan(records, paths)
    assert plan == [("a", "c", "a+b"), ("b", "c", "a+b")]
    records += [
        rec(["a", "c"], 368.0, level="layer2", retest_of="a+b"),
        rec(["b", "c"], 371.0, level="layer2", retest_of="a+b"),
    ]
    assert pt.retest_blame(records, paths) == (
        {},
        ["pair a+b: the re-tested node(s) measured well with other partners (not reproduced)"],
    )


def test_failed_pairs_re_test_only_without_a_clear_partner_and_a_failed_re_test_blames():
    paths = {n: ["t", "m", "l"] for n in "abcd"}
    # c failed with both of its partners, which are cleared by their good pairs: no
    # partner is left outside the suspect pairs, and the ring's blame names c anyway
    ring = [rec(["a", "b"], 370.0), rec(["b", "c"], None, verdict="NO-GO"), rec(["c", "a"], None, verdict="NO-GO")]
    assert pt.retest_plan(ring, paths) == []
    assert list(vr.blame(ring)) == ["c"]
    # a lone failed pair next to a good one: both of its nodes are measured again
    lone = [rec(["a", "b"], 370.0), rec(["c", "d"], None, verdict="NO-GO")]
    assert pt.retest_plan(lone, paths) == [("c", "a", "c+d"), ("d", "a", "c+d")]
    lone += [rec(["c", "a"], None, verdict="NO-GO", retest_of="c+d"), rec(["d", "a"], 369.0, retest_of="c+d")]
    assert pt.retest_blame(lone, paths) == ({"c": "all_reduce NO-GO: low with a (re-test of c+d)"}, [])
