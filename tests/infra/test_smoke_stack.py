"""Pulumi.smoke.yaml, the hour-long smoke test on on-demand g6e.48xlarge, under the
render's mocks: what `pulumi up` would create (not yet run on AWS)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from model.catalog import CATALOG
from offline.mocks import run_under_mocks
from policy import rules
from tests.support.mocks import Run, stack_config

LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
FS = "aws:fsx/lustreFileSystem:LustreFileSystem"
PG = "aws:ec2/placementGroup:PlacementGroup"


@pytest.fixture(scope="module")
def smoke():
    raw, region = stack_config("smoke")
    mocks, urns, outputs, node_files = run_under_mocks(raw, region, stack="smoke")
    return Run(mocks.resources, urns, outputs, node_files, calls=mocks.calls)


def test_two_on_demand_nodes_no_block(smoke):
    groups = {g["name"]: g["inputs"] for g in smoke.of_type(ASG)}
    assert sorted(groups) == ["smoke-controller", "smoke-workers"]
    assert [(g["minSize"], g["maxSize"], g["desiredCapacity"]) for g in groups.values()] == [(1, 1, 1), (1, 1, 1)]
    assert not smoke.of_type("aws:autoscaling/schedule:Schedule")
    assert smoke.value["capacity_block_ids"] == []
    for lt in smoke.of_type(LT):
        assert lt["inputs"]["instanceType"] == "g6e.48xlarge"
        assert "instanceMarketOptions" not in lt["inputs"]  # on demand, no capacity-block market
        assert "capacityReservationSpecification" not in lt["inputs"]


def test_efa_layout_is_one_ena_and_four_efa_only(smoke):
    lt = smoke.inputs(LT, "smoke-lt")
    got = [(i["networkCardIndex"], i["deviceIndex"], i.get("interfaceType")) for i in lt["networkInterfaces"]]
    assert got == [(0, 0, "interface"), (0, 1, "efa-only"), (1, 0, "efa-only"), (2, 0, "efa-only"), (3, 0, "efa-only")]


def test_cluster_placement_group_and_disposable_scratch_file_system(smoke):
    [pg] = smoke.of_type(PG)
    assert pg["inputs"]["strategy"] == "cluster"
    [fs] = smoke.of_type(FS)
    assert (fs["inputs"]["deploymentType"], fs["inputs"]["storageCapacity"]) == ("SCRATCH_2", 1200)
    assert fs["options"]["protect"] is False  # `pulumi destroy` deletes it with the stack
    # The stack creates its VPC (no subnet to find first).
    assert len(smoke.of_type("aws:ec2/vpc:Vpc")) == 1


def test_gate_floors_follow_the_400_gbit_efa(smoke):
    cfg = smoke.node_files.files["/opt/gpu-cluster/validation/config.json"].decode()
    spec = CATALOG["g6e.48xlarge"]
    assert f'"efa_gbps": {spec.efa_gbps}' in cfg and '"expect_nics": 4' in cfg
    assert '"all_reduce_min_algbw": 30.0' in cfg  # as p4d's, the other 400 Gbit/s type
    assert '"instance_type": "g6e.48xlarge"' in cfg


def test_every_policy_passes(smoke):
    assert {r["name"]: v for r in smoke.resources if (v := rules.violations(r["type"], r["inputs"], False))} == {}


def test_stack_file_says_it_has_not_run_on_aws():
    text = (Path(__file__).resolve().parents[2] / "Pulumi.smoke.yaml").read_text()
    assert "NOT YET RUN ON AWS" in text
    assert yaml.safe_load(text)["config"]["gpu-cluster:cluster"]["capacity"] == {"nodes": 2}
