"""The gate with the controller's topology record: pairs by network node, figures per
level, and a node that is 6% slow found among its peers, measured again with another
partner and drained alone (fake Slurm and fake GPU tools, the shipped gate.sh)."""

from __future__ import annotations

import json

from tests.support.fake_slurm import run_fake_gpu_gate


def _topology(tmp_path, leaves: dict[str, list[str]]) -> None:
    nodes = {
        node: {"instance_id": f"i-{node}", "network_nodes": ["nn-top", "nn-mid", leaf], "flat_reason": None}
        for leaf, members in leaves.items()
        for node in members
    }
    (tmp_path / "fsx" / "topology").mkdir(parents=True)
    (tmp_path / "fsx" / "topology" / "nodes.json").write_text(json.dumps({"plugin": "tree", "nodes": nodes}))


def test_slow_node_is_named_re_tested_and_drained_alone(tmp_path):
    _topology(tmp_path, {"nn-l1": ["n1", "n2"], "nn-l2": ["n3", "n4"]})
    proc, report = run_fake_gpu_gate(tmp_path, ["n1", "n2", "n3", "n4"], FAKE_SLOW="n4")
    got = [
        ("+".join(r["nodes"]), r.get("level"), r.get("retest_of")) for r in report["steps"] if r["step"] == "all_reduce"
    ]
    assert got == [
        # the pair of each leaf, one pair across the middle node
        ("n1+n2", "leaf", None),
        ("n3+n4", "leaf", None),
        ("n1+n3", "layer2", None),
        # n3+n4 is 6% below the other same-leaf pair; neither node has a pair that clears
        # it (n1+n3 is alone at its level), so both are measured again with n1, and only
        # n4 stays low
        ("n3+n1", "layer2", "n3+n4"),
        ("n4+n1", "layer2", "n3+n4"),
    ], proc.stdout + proc.stderr
    topo = report["topology"]
    assert topo["levels"]["leaf"]["all_reduce"] == {"GO": 2, "NO-GO": 0, "median": 251.99}
    assert topo["levels"]["layer2"]["all_reduce"] == {"GO": 1, "NO-GO": 0, "median": 259.78}
    assert topo["outliers"] == {
        "n3+n4 all_reduce": "all_reduce 244.2 is 6% below the median 259.78 of the other 1 pair(s) at level leaf",
        # the fake answers alltoall with the same log
        "n3+n4 alltoall": "alltoall 244.2 is 6% below the median 259.78 of the other 1 pair(s) at level leaf",
    }
    assert list(report["blamed_nodes"]) == ["n4"]
    assert report["blamed_nodes"]["n4"] == (
        "all_reduce 244.2 is 6% below the median 259.78 of the others with n1 (re-test of n3+n4)"
    )
    assert report["verdict"] == "GO"  # every figure is above its floor: the slow node is drained, the run is not failed
    calls = (tmp_path / "calls.log").read_text()
    assert (
        "scontrol update nodename=n4 state=drain reason=gpu-cluster validation: all_reduce 244.2 is 6% below" in calls
    )
    assert "nodename=n3 " not in calls
    summary = (tmp_path / "fsx" / "validation" / report["run_id"] / "summary.txt").read_text()
    assert "  level leaf: all_reduce median 251.99 (2 GO, 0 NO-GO), alltoall median 251.99 (2 GO, 0 NO-GO)" in summary
    assert "  outlier n3+n4 all_reduce: all_reduce 244.2 is 6% below" in summary
    assert "  bad node n4: all_reduce 244.2 is 6% below the median 259.78 of the others with n1" in summary
