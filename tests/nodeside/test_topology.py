"""The controller's topology refresh (nodeside/topology.py) against answers shaped exactly
like DescribeInstanceTopology's: botocore's Stubber checks every request against the EC2
service model (InstanceIds at most 100 per call, never with MaxResults) and every answer
against its output shape; pagination, instances without topology, throttling and a
denied role go through the shipped aws_client."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from nodeside import aws_client, topology

SESSION = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")


@functools.cache
def ec2():
    """One client for the module (loading EC2's model is the slow part); each test stubs it anew."""
    return aws_client.client("ec2", region="us-east-2", session=SESSION)


def inst(iid: str, *nns: str, itype: str = "p5.48xlarge", **extra) -> dict:
    return {"InstanceId": iid, "InstanceType": itype, "NetworkNodes": list(nns), **extra}


class FakeSlurm:
    """sinfo and scontrol as the refresh calls them; records each call."""

    def __init__(self, nodes: list[str], reconfigure_rc: int = 0, version: str = "slurm 23.11.4"):
        self.nodes, self.reconfigure_rc, self.version, self.calls = nodes, reconfigure_rc, version, []

    def __call__(self, argv, **kw):
        self.calls.append(argv)
        if argv[0] == "sinfo":
            return subprocess.CompletedProcess(argv, 0, "".join(f"{n}\n" for n in self.nodes), "")
        if argv[:2] == ["scontrol", "--version"]:
            return subprocess.CompletedProcess(argv, 0, f"{self.version}\n", "")
        if argv[:2] == ["scontrol", "reconfigure"]:
            return subprocess.CompletedProcess(argv, self.reconfigure_rc, "", "slurm_reconfigure error: x")
        raise AssertionError(f"unexpected command {argv}")


def markers(fsx: Path, pairs: dict[str, str]) -> None:
    (fsx / "status").mkdir(parents=True, exist_ok=True)
    for node, iid in pairs.items():
        (fsx / "status" / f"{node}.json").write_text(json.dumps({"node": node, "instance_id": iid, "state": "ok"}))


def args(fsx: Path, plugin: str = "tree", force: bool = False):
    return topology._parser().parse_args(
        ["--fsx-root", str(fsx), "--conf", str(fsx / "etc/topology.conf"), "--plugin", plugin, "refresh"]
        + (["--force"] if force else [])
    )


def test_tree_has_one_switch_per_network_node_and_a_root_over_two_tops():
    placed = {
        "n1": ["nn-a", "nn-b", "nn-c"],
        "n2": ["nn-a", "nn-b", "nn-c"],
        "n3": ["nn-a", "nn-b", "nn-d"],
        "n4": ["nn-e", "nn-f", "nn-g"],
    }
    assert topology.render_tree(placed, {}) == (
        "SwitchName=nn-c Nodes=n1,n2\n"
        "SwitchName=nn-d Nodes=n3\n"
        "SwitchName=nn-g Nodes=n4\n"
        "SwitchName=nn-a Switches=nn-b\n"
        "SwitchName=nn-e Switches=nn-f\n"
        "SwitchName=nn-b Switches=nn-c,nn-d\n"
        "SwitchName=nn-f Switches=nn-g\n"
        "SwitchName=gpu-cluster-root Switches=nn-a,nn-e\n"
    )
    # One top-layer node reaches every node: no synthetic root.
    one_top = {k: v for k, v in placed.items() if k != "n4"}
    assert "gpu-cluster-root" not in topology.render_tree(one_top, {})


def test_uncovered_nodes_share_a_flat_leaf_under_the_root_and_nothing_covered_is_no_switch():
    text = topology.render_tree({"n1": ["nn-a", "nn-b", "nn-c"]}, {"n9": "no network nodes"})
    assert text.splitlines()[-2:] == [
        "SwitchName=gpu-cluster-flat Nodes=n9",
        "SwitchName=gpu-cluster-root Switches=nn-a,gpu-cluster-flat",
    ]
    assert topology.render_tree({}, {"n9": "x"}, header="# h") == "# h\n"


def test_four_layer_paths_and_parents_before_children_order():
    placed = {"n1": ["t", "m1", "m2", "l1"], "n2": ["t", "m1", "m3", "l2"]}
    lines = topology.render_tree(placed, {}).splitlines()
    assert lines == [
        "SwitchName=l1 Nodes=n1",
        "SwitchName=l2 Nodes=n2",
        "SwitchName=t Switches=m1",
        "SwitchName=m1 Switches=m2,m3",
        "SwitchName=m2 Switches=l1",
        "SwitchName=m3 Switches=l2",
    ]


def test_a_contradicting_path_falls_back_to_flat_not_a_broken_tree():
    ids = {"n1": "i-1", "n2": "i-2", "n3": "i-3"}
    answers = {
        "i-1": inst("i-1", "nn-a", "nn-b", "nn-c"),
        "i-2": inst("i-2", "nn-x", "nn-b", "nn-d"),  # nn-b under a second parent
        "i-3": inst("i-3", "nn-a", "nn-c"),  # a leaf used as an inner node
    }
    placed, flat = topology.placement(ids, answers)
    assert list(placed) == ["n1"]
    assert set(flat) == {"n2", "n3"} and "contradict" in flat["n2"]


def test_switch_names_slurm_would_misread_are_replaced_by_a_stable_digest():
    assert topology.switch_name("nn-1111111111111111") == "nn-1111111111111111"
    long_number = "nn-" + "9" * 25
    safe = topology.switch_name(long_number)
    assert safe != long_number and safe == topology.switch_name(long_number) and safe.endswith("x")
    assert topology.switch_name("nn,a b") != "nn,a b"
    assert len(topology.switch_name("nn-" + "a" * 80)) <= 64


def test_block_groups_by_ultraserver_domain_else_leaf():
    placed = {"n1": ["a", "b", "c"], "n2": ["a", "b", "c"], "n3": ["a", "b", "d"]}
    by_node = {"n1": {"CapacityBlockId": "cr-u1"}, "n2": {"CapacityBlockId": "cr-u1"}, "n3": {}}
    assert topology.render_block(placed, {"n4": "x"}, by_node) == (
        "BlockName=cr-u1 Nodes=n1,n2\nBlockName=d Nodes=n3\nBlockName=gpu-cluster-flat Nodes=n4\n"
    )


def test_describe_batches_ids_by_100_without_max_results_and_follows_next_token():
    ids = [f"i-{n:017x}" for n in range(150)]
    first, second = ids[:100], ids[100:]
    client = ec2()
    with Stubber(client) as stub:
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [inst(i, "nn-a", "nn-b", "nn-c") for i in first[:60]], "NextToken": "p2"},
            {"InstanceIds": first},
        )
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [inst(i, "nn-a", "nn-b", "nn-d") for i in first[60:]]},
            {"InstanceIds": first, "NextToken": "p2"},
        )
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [inst(i, "nn-a", "nn-e", "nn-f") for i in second]},
            {"InstanceIds": second},
        )
        got = topology.describe(topology.aws_pages(client), reversed(ids))
        stub.assert_no_pending_responses()
    assert sorted(got) == ids
    assert got[ids[70]]["NetworkNodes"] == ["nn-a", "nn-b", "nn-d"]


def _refresh_with(tmp_path, answer, nodes=("n1", "n2", "n3", "n4"), version="slurm 23.11.4", **kw):
    fsx = tmp_path / "fsx"
    markers(fsx, {"n1": "i-1", "n2": "i-2", "n3": "i-3"})  # n4 left no marker
    slurm = FakeSlurm(list(nodes), version=version)
    client = ec2()
    with Stubber(client) as stub:
        answer(stub)
        rc = topology.main(
            [
                *sum(([f"--{k}", v] for k, v in kw.items()), []),
                "--fsx-root",
                str(fsx),
                "--conf",
                str(fsx / "etc/topology.conf"),
                "refresh",
            ],
            fetch_pages=topology.aws_pages(client),
            run=slurm,
        )
    return rc, fsx, slurm


def test_refresh_writes_publishes_records_and_reconfigures_once(tmp_path, capsys):
    def answer(stub):
        stub.add_response(
            "describe_instance_topology",
            {
                "Instances": [
                    inst("i-1", "nn-a", "nn-b", "nn-c"),
                    inst("i-2", "nn-a", "nn-b", "nn-c"),
                    inst("i-3", itype="p5.48xlarge"),  # running for seconds: no nodes yet
                ]
            },
            {"InstanceIds": ["i-1", "i-2", "i-3"]},
        )

    rc, fsx, slurm = _refresh_with(tmp_path, answer)
    out = capsys.readouterr().out
    assert rc == 0
    conf = (fsx / "etc/topology.conf").read_text()
    assert conf.splitlines()[2:] == [
        "SwitchName=nn-c Nodes=n1,n2",
        "SwitchName=nn-a Switches=nn-b",
        "SwitchName=nn-b Switches=nn-c",
        "SwitchName=gpu-cluster-flat Nodes=n3,n4",
        "SwitchName=gpu-cluster-root Switches=nn-a,gpu-cluster-flat",
    ]
    assert (fsx / "topology/topology.conf").read_text() == conf
    assert ["scontrol", "reconfigure"] in slurm.calls
    assert "topology: n3 stays in the flat layout for now: no network nodes for p5.48xlarge (yet)" in out
    assert "topology: n4 stays in the flat layout for now: no boot marker with its instance id on /fsx" in out
    recorded = json.loads((fsx / "topology/nodes.json").read_text())["nodes"]
    assert recorded["n1"]["network_nodes"] == ["nn-a", "nn-b", "nn-c"] and recorded["n1"]["instance_id"] == "i-1"
    assert recorded["n3"]["network_nodes"] is None and recorded["n4"]["instance_id"] is None

    # The same answer again: nothing to apply, no reconfigure.
    rc, fsx, slurm = _refresh_with(tmp_path, answer)
    assert rc == 0 and ["scontrol", "reconfigure"] not in slurm.calls
    assert "topology: unchanged (2 placed, 2 flat)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("code", "status", "said"),
    [
        ("RequestLimitExceeded", 503, "throttled (RequestLimitExceeded) after 5 attempts: slow down"),
        (
            "UnauthorizedOperation",
            403,
            "access denied (UnauthorizedOperation): the instance role lacks ec2:DescribeInstanceTopology: slow down",
        ),
    ],
)
def test_a_refused_call_keeps_known_network_nodes_and_puts_newcomers_flat(tmp_path, capsys, code, status, said):
    """EC2 cannot be read: the nodes the last refresh placed keep their network nodes, a
    node Slurm created since then goes flat (so a job may name it), exit 3, said once."""
    topo = tmp_path / "fsx" / "topology"
    topo.mkdir(parents=True)
    known = {
        "n1": {"instance_id": "i-1", "instance_type": "p5.48xlarge", "network_nodes": ["a", "b", "c"]},
        "n2": {"instance_id": "i-2", "instance_type": "p5.48xlarge", "network_nodes": ["a", "b", "c"]},
        "n3": {"instance_id": "i-old", "instance_type": "p5.48xlarge", "network_nodes": ["a", "b", "d"]},  # replaced
    }
    (topo / "nodes.json").write_text(json.dumps({"nodes": known}))

    def answer(stub):
        stub.add_client_error("describe_instance_topology", code, "slow down", http_status_code=status)

    rc, fsx, slurm = _refresh_with(tmp_path, answer)
    assert rc == 3
    assert capsys.readouterr().err.strip() == (
        f"topology: ec2:DescribeInstanceTopology: {said}; nodes keep their last known network nodes, new ones are flat"
    )
    assert (fsx / "etc/topology.conf").read_text().splitlines()[2:] == [
        "SwitchName=c Nodes=n1,n2",
        "SwitchName=a Switches=b",
        "SwitchName=b Switches=c",
        "SwitchName=gpu-cluster-flat Nodes=n3,n4",
        "SwitchName=gpu-cluster-root Switches=a,gpu-cluster-flat",
    ]
    assert ["scontrol", "reconfigure"] in slurm.calls
    flat = json.loads((topo / "nodes.json").read_text())["nodes"]["n3"]["flat_reason"]
    assert flat == "EC2 could not be read"


def test_a_failed_reconfigure_is_exit_3_with_slurms_words(tmp_path, capsys):
    fsx = tmp_path / "fsx"
    markers(fsx, {"n1": "i-1"})

    def fetch(**params):
        yield inst("i-1", "a", "b", "c")

    rc = topology.main(["--fsx-root", str(fsx), "--conf", str(fsx / "t.conf"), "refresh"], fetch, FakeSlurm(["n1"], 1))
    assert rc == 3
    assert "scontrol reconfigure failed: slurm_reconfigure error: x; applied again at the next refresh" in (
        capsys.readouterr().err
    )
    # not applied: the next refresh reconfigures again, though the file is already written
    slurm = FakeSlurm(["n1"])
    assert topology.main(["--fsx-root", str(fsx), "--conf", str(fsx / "t.conf"), "refresh"], fetch, slurm) == 0
    assert ["scontrol", "reconfigure"] in slurm.calls


def test_block_plugin_from_the_command_line(tmp_path):
    def answer(stub):
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [inst("i-1", "a", "b", "c"), inst("i-2", "a", "b", "c"), inst("i-3", "a", "b", "d")]},
            {"InstanceIds": ["i-1", "i-2", "i-3"]},
        )

    rc, fsx, _ = _refresh_with(tmp_path, answer, nodes=("n1", "n2", "n3"), plugin="block")
    assert rc == 0
    assert (fsx / "etc/topology.conf").read_text().splitlines()[2:] == [
        "BlockName=c Nodes=n1,n2",
        "BlockName=d Nodes=n3",
    ]


def test_no_fsx_root_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.delenv("FSX_ROOT", raising=False)
    assert topology.main(["refresh"]) == 2
    assert "--fsx-root" in capsys.readouterr().err


def test_slurm_before_23_02_2_gets_no_switch_but_the_record_keeps_the_network_nodes(tmp_path, capsys):
    """22.05 leaves dynamic nodes out of the switch tree (fixed in 23.02.2): a file with
    switches would make every node unschedulable there, so it stays without one."""

    def answer(stub):
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [inst("i-1", "a", "b", "c"), inst("i-2", "a", "b", "c"), inst("i-3", "a", "b", "d")]},
            {"InstanceIds": ["i-1", "i-2", "i-3"]},
        )

    rc, fsx, slurm = _refresh_with(tmp_path, answer, version="slurm-wlm 22.05.8")
    assert rc == 0
    conf = (fsx / "etc/topology.conf").read_text()
    assert "SwitchName" not in conf and "Slurm 22.05.8 leaves dynamic nodes out" in conf
    out = capsys.readouterr().out
    assert "predates dynamic nodes in topology.conf (23.02.2): recorded, not applied" in out
    recorded = json.loads((fsx / "topology/nodes.json").read_text())["nodes"]
    assert recorded["n3"]["network_nodes"] == ["a", "b", "d"]
    # Written and published, never reconfigured: nothing to apply, and on 22.05 a reconfigure
    # leaves a dynamic node that runs a job across it ALLOCATED once the job ends
    # (tests/daemons/test_topology_slurm.py). The tick reads the counts off the last line.
    assert ["scontrol", "reconfigure"] not in slurm.calls
    assert (fsx / "topology/topology.conf").read_text() == conf
    assert out.splitlines()[-1] == (
        f"topology: wrote {fsx / 'etc/topology.conf'} (3 placed, 1 flat); no scontrol reconfigure (Slurm 22.05.8)"
    )


def test_failed_boot_placeholders_are_not_placed():
    """The placeholder of a failed boot (lib/boot-failures.sh) has no instance behind it:
    topology.conf names only real nodes, so listing one does not change the file."""
    out = "n1|none\nn2|Kill task failed\nip-10-0-0-9|boot failed at 40-munge: munged did not start\n"

    def run(argv, **kw):
        assert argv == ["sinfo", "-h", "-N", "-o", "%N|%E"]
        return subprocess.CompletedProcess(argv, 0, out, "")

    assert topology.slurm_nodes(run) == ["n1", "n2"]
    shell = (Path(topology.__file__).parent / "lib/boot-failures.sh").read_text()
    assert f'readonly BOOT_FAILED_PREFIX="{topology.BOOT_FAILED_PREFIX}"' in shell
