"""GpuCluster, the whole cluster as one component: examples/component/ (another
project's program) run as it is under the render's mocks."""

from __future__ import annotations

import copy
import json
import runpy
from pathlib import Path

import pulumi
import pytest
import yaml

from offline.mocks import plan_mocks, run_with_mocks

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "component"
PROJECT = "training-platform"
KEY = f"{PROJECT}:cluster"
MY_AMI = "ami-04c7e1b95a3d2f806"


def _stack() -> tuple[dict, str]:
    config = yaml.safe_load((EXAMPLE / "Pulumi.example.yaml").read_text())["config"]
    return copy.deepcopy(config[KEY]), config["aws:region"]


def _run(raw: dict, region: str):
    mocks = plan_mocks(raw, region)
    exported: dict[str, object] = {}

    def program():
        real_export = pulumi.export
        pulumi.export = lambda name, value: exported.__setitem__(name, value)
        try:
            runpy.run_path(str(EXAMPLE / "__main__.py"), run_name="__main__")
        finally:
            pulumi.export = real_export
        return exported

    config = {KEY: json.dumps(raw), "aws:region": region}
    value, urns = run_with_mocks(program, mocks, stack="example", config=config, project=PROJECT)
    return mocks, urns, value


def test_the_example_as_shipped_is_refused_at_its_example_ami():
    raw, region = _stack()
    with pytest.raises(pulumi.RunError) as err:
        _run(raw, region)
    [line] = str(err.value).splitlines()
    assert line.startswith("gpu-cluster:cluster.image.ami_id: ami-0c0ffee0c0ffee0c0 is the example value")


def test_the_example_declares_one_cluster_under_one_component():
    raw, region = _stack()
    raw["image"]["ami_id"] = MY_AMI
    mocks, urns, exported = _run(raw, region)
    components = [r for r in mocks.resources if not r["custom"]]
    [top] = [r for r in components if r["type"] == "gpu-cluster:index:GpuCluster"]
    assert top["name"] == "training"
    # Every resource of the cluster sits under the component: follow each one's parent.
    parent_of = {urns[f"{r['name']}|{r['type']}"]: r["options"].get("parent") for r in mocks.resources}
    top_urn = urns[f"training|{top['type']}"]
    for urn in parent_of:
        chain = [urn]
        while parent_of.get(chain[-1]):
            chain.append(parent_of[chain[-1]])
        assert urn == top_urn or top_urn in chain, chain
    assert sum(1 for r in mocks.resources if r["custom"]) > 30
    # The component's name is the cluster's: the AWS names the program fixes derive from it.
    groups = sorted(r["inputs"]["name"] for r in mocks.resources if r["type"] == "aws:autoscaling/group:Group")
    assert groups == ["gpu-cluster-training-controller", "gpu-cluster-training-workers"]
    assert exported["controller_ssm_command"].startswith("aws ssm start-session")
    assert set(exported["node_groups"]) == {"controller", "workers"}


def test_bad_config_declares_nothing_and_names_every_problem():
    raw, region = _stack()
    raw["capacity"]["nodes"] = 0
    raw["fsx"]["storage_capacity_gib"] = 1000
    mocks = plan_mocks(raw, region)
    with pytest.raises(pulumi.RunError) as err:
        _run(raw, region)
    paths = [line.split(": ")[0] for line in str(err.value).splitlines()]
    assert "gpu-cluster:cluster.capacity.nodes" in paths and "gpu-cluster:cluster.fsx.storage_capacity_gib" in paths
    assert mocks.resources == []
