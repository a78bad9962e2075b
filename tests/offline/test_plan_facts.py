"""plan.json records what the engine orders and guards by: each resource's dependencies
and resource options (captured from the RegisterResource requests in the mock monitor;
Pulumi's Mocks callbacks never see them), and `--at TIME` renders the program at TIME."""

from __future__ import annotations

import json
from pathlib import Path

import pulumi
import pytest

from offline.mocks import OPTION_DEFAULTS, PlanMocks, run_with_mocks
from offline.plan import main, parse_at
from stackfile.errors import InputError

FS = "aws:fsx/lustreFileSystem:LustreFileSystem"
SG = "aws:ec2/securityGroup:SecurityGroup"
ASG = "aws:autoscaling/group:Group"
SCHEDULE = "aws:autoscaling/schedule:Schedule"


def test_dependencies_and_options_come_from_the_registration():
    """Every option the engine acts on, set explicitly, arrives in the record."""

    def program():
        a = pulumi.CustomResource("test:index:Thing", "a", {"x": 1})
        b = pulumi.CustomResource(
            "test:index:Thing",
            "b",
            {"y": a.id},  # an implicit dependency, through an input
            opts=pulumi.ResourceOptions(
                protect=True,
                ignore_changes=["z", "y"],
                delete_before_replace=True,
                replace_on_changes=["y"],
                retain_on_delete=True,
            ),
        )
        c = pulumi.CustomResource("test:index:Thing", "c", {}, opts=pulumi.ResourceOptions(depends_on=[b, a]))
        return c.id

    mocks = PlanMocks("us-east-2")
    _, urns = run_with_mocks(program, mocks, config={"aws:region": "us-east-2"})
    by = {r["name"]: r for r in mocks.resources}
    assert by["a"]["dependencies"] == [] and by["a"]["options"] == {
        **OPTION_DEFAULTS,
        "parent": by["a"]["options"]["parent"],
    }
    assert by["a"]["options"]["parent"].endswith("pulumi:pulumi:Stack::gpu-cluster-dev")
    assert by["b"]["dependencies"] == [urns["a|test:index:Thing"]]
    assert {k: v for k, v in by["b"]["options"].items() if k != "parent"} == {
        "protect": True,
        "ignore_changes": ["y", "z"],
        "delete_before_replace": True,
        "replace_on_changes": ["y"],
        "retain_on_delete": True,
    }
    assert by["c"]["dependencies"] == sorted([urns["a|test:index:Thing"], urns["b|test:index:Thing"]])


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("facts")
    assert main(["--stack", "dev", "--out", str(out)]) == 0
    return json.loads((out / "plan.json").read_text())


def test_plan_json_records_facts_for_every_resource(plan):
    urns = {r["urn"] for r in plan["resources"]}
    for r in plan["resources"]:
        assert set(r["options"]) == set(OPTION_DEFAULTS), r["name"]
        assert r["dependencies"] == sorted(r["dependencies"])
        # Every dependency is a resource of the plan (nothing dangling).
        assert set(r["dependencies"]) <= urns, r["name"]
    fs = next(r for r in plan["resources"] if r["type"] == FS)
    assert fs["options"]["protect"] is True  # PERSISTENT_2: protected by default
    assert fs["options"]["parent"].endswith("gpu-cluster:index:FileSystem::dev")
    sg = next(r for r in plan["resources"] if r["type"] == SG)
    assert sg["urn"] in fs["dependencies"]
    assert plan["at"] == "2026-12-01T00:00:00Z"


def test_at_renders_what_the_program_declares_then(tmp_path, capsys):
    """Dev's block starts 2026-12-01T11:30Z: before it the groups are at zero with a
    scale-out action, during it they are at full size and only scale-in is left."""
    assert main(["--stack", "dev", "--out", str(tmp_path), "--at", "2026-12-03T00:00:00+01:00"]) == 0
    during = json.loads((tmp_path / "plan.json").read_text())
    assert during["at"] == "2026-12-02T23:00:00Z"
    assert "--at 2026-12-02T23:00:00Z" in during["generated_by"]
    sizes = {r["name"]: r["inputs"]["desiredCapacity"] for r in during["resources"] if r["type"] == ASG}
    assert sizes and all(n >= 1 for n in sizes.values()), sizes
    actions = sorted(r["name"] for r in during["resources"] if r["type"] == SCHEDULE)
    assert actions and all(a.endswith("-scale-in") for a in actions), actions


def test_at_default_is_the_fixed_plan_time(plan):
    sizes = {r["name"]: r["inputs"]["desiredCapacity"] for r in plan["resources"] if r["type"] == ASG}
    assert sizes and set(sizes.values()) == {0}
    assert "--at" not in plan["generated_by"]


@pytest.mark.parametrize(
    "value,why",
    [
        ("2026-12-08T12:00:00", "has no zone"),
        ("tomorrow", "is not an ISO-8601 time"),
        ("2026-13-08T12:00:00Z", "is not an ISO-8601 time"),
    ],
)
def test_bad_at_is_refused_in_one_line(value, why, tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["--stack", "dev", "--out", str(out), "--at", value]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"--at {value}: {why}; give an ISO-8601 time with a zone, e.g. 2026-12-08T12:00:00Z or +01:00"]
    assert not out.exists()


def test_parse_at_normalises_to_utc():
    assert parse_at("2026-12-08T12:30:00+01:00").isoformat() == "2026-12-08T11:30:00+00:00"
    assert parse_at("2026-12-08T11:30Z").isoformat() == "2026-12-08T11:30:00+00:00"
    with pytest.raises(InputError):
        parse_at("")


def test_facts_survive_into_plan_json_byte_stably(tmp_path: Path):
    """Sorted lists, no registration-order effects: two renders are identical."""
    for d in ("a", "b"):
        assert main(["--stack", "dev", "--out", str(tmp_path / d)]) == 0
    assert (tmp_path / "a" / "plan.json").read_bytes() == (tmp_path / "b" / "plan.json").read_bytes()


def test_each_run_in_one_process_has_its_own_stack():
    """set_mocks keeps an existing root stack resource: a second run in the same process
    (another stack name) was parented to the first run's stack (seen when the plan CLI
    tests ran after the program tests in one xdist worker)."""

    def program():
        return pulumi.CustomResource("test:index:Thing", "a", {"x": 1}).id

    for stack in ("first", "second"):
        mocks = PlanMocks("us-east-2")
        run_with_mocks(program, mocks, stack=stack, config={"aws:region": "us-east-2"})
        assert (
            mocks.resources[0]["options"]["parent"]
            == f"urn:pulumi:{stack}::gpu-cluster::pulumi:pulumi:Stack::gpu-cluster-{stack}"
        )


def test_a_mocked_run_skips_the_sdks_stack_walk_and_puts_it_back():
    from pulumi.runtime import resource as sdk_resource

    real = sdk_resource._get_stack_trace
    seen: list[int] = []

    def program():
        seen.append(len(sdk_resource._get_stack_trace().frames))
        return pulumi.CustomResource("test:index:Thing", "a", {}).id

    run_with_mocks(program, PlanMocks("us-east-2"), config={"aws:region": "us-east-2"})
    assert seen == [0]  # inside the run: an empty trace, no frame walked
    assert sdk_resource._get_stack_trace is real
