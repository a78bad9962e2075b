"""`python3 -m ops status`: groups, blocks, instances and the gate, from stubbed AWS and SSM."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from ops.cli import main
from ops.remote import STATUS_BEGIN, status_script
from tests.support.ops_stubs import (
    CR,
    Aws,
    FakeClock,
    asg,
    asg_instance,
    context,
    ec2_instance,
    reservation,
    stub_controller,
    stub_ssm,
)
from tests.support.status_stack import CTRL, W1, stack_dir

TAG_FILTER = {"Filters": [{"Name": "tag:GpuClusterName", "Values": ["dev"]}]}


def stub_cluster(aws: Aws, remote: dict | None, block: dict | None = None) -> None:
    a, ec2 = aws.stub("autoscaling"), aws.stub("ec2")
    a.add_response(
        "describe_auto_scaling_groups",
        {
            "AutoScalingGroups": [
                asg("block-a", [asg_instance(W1, health="Unhealthy", version="2")]),
                asg("controller", [asg_instance(CTRL)]),
            ]
        },
        TAG_FILTER,
    )
    ec2.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [block or reservation()]},
        {"CapacityReservationIds": [CR]},
    )
    ec2.add_response(
        "describe_instances",
        {
            "Reservations": [
                {"Instances": [ec2_instance(W1, "10.0.1.6", "block-a"), ec2_instance(CTRL, "10.0.1.5", "controller")]}
            ]
        },
        {"InstanceIds": [W1, CTRL]},
    )
    stub_controller(aws, CTRL)
    if remote is not None:
        stub_ssm(
            aws,
            CTRL,
            status_script("dev"),
            "gpu-cluster status",
            120,
            f"{STATUS_BEGIN}\n{json.dumps(remote)}\n",
            pending=2,
        )


REMOTE = {
    "markers": {
        "ip-10-0-1-5": {"state": "ok", "step": "90-done", "kernel": "6.8.0-1015-aws", "image_manifest": "none"},
        "ip-10-0-1-6": {"state": "failed", "step": "40-fsx"},
    },
    "validation": {"verdict": "NO-GO", "run_id": "20261201-1130", "blamed_nodes": ["ip-10-0-1-6"], "reasons": []},
    "slurm": {"ip-10-0-1-5": "idle", "ip-10-0-1-6": "drained"},
    "reasons": {"ip-10-0-1-6": "gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)"},
    "health": {
        "ip-10-0-1-5": {"state": "healthy", "time": "2026-12-01T11:58:00Z", "failed": []},
        "ip-10-0-1-6": {
            "state": "unhealthy",
            "time": "2026-12-01T11:57:00Z",
            "failed": ["gpu count 7 of 8 (nvidia-smi -L)", "efa devices 31 of 32 (/sys/class/infiniband)"],
        },
    },
    # the controller's last topology refresh (nodes.json, via cluster_status.py)
    "topology": {
        "ip-10-0-1-5": {
            "network_nodes": ["nn-0a1b2c3d4e5f60001", "nn-0a1b2c3d4e5f60011", "nn-0a1b2c3d4e5f60111"],
            "flat_reason": None,
        },
        "ip-10-0-1-6": {"network_nodes": None, "flat_reason": "no network nodes for p5.48xlarge (yet)"},
    },
}


def run(aws, tmp_path, *extra, **block_dates):
    clock = FakeClock()
    ctx = context(aws, clock=clock)
    root = stack_dir(tmp_path, **block_dates)
    rc = main(["status", "--stack", "dev", "--stack-dir", str(root), *extra], ctx=ctx, session_for=aws.session)
    aws.done()
    return rc, ctx.out.getvalue(), ctx.err.getvalue(), clock


def test_status_text(tmp_path):
    aws = Aws()
    stub_cluster(aws, REMOTE)
    rc, out, err, clock = run(aws, tmp_path)
    assert rc == 1  # a NO-GO gate and a failed boot
    assert err.splitlines()[-1] == "status: the validation gate is NO-GO; boot failed on ip-10-0-1-6 at 40-fsx"
    assert out.splitlines() == [
        "cluster dev (us-east-2)",
        "group block-a (gpu-cluster-dev-block-a): desired 1, template v3, block cr-0123456789abcdef0 active "
        "2026-11-30T12:00:00Z .. 2026-12-07T12:00:00Z",
        "  i-0b000000000000002  10.0.1.6  ip-10-0-1-6  InService/Unhealthy  v2  boot failed at 40-fsx  slurm drained"
        "  health unhealthy (2026-12-01T11:57:00Z)",
        "    image ami-0a1b2c3d4e5f60718  kernel ?  manifest ?",
        "    drain reason: gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)",
        "    health failed: gpu count 7 of 8 (nvidia-smi -L)",
        "    health failed: efa devices 31 of 32 (/sys/class/infiniband)",
        "    network nodes: none yet (no network nodes for p5.48xlarge (yet))",
        "group controller (gpu-cluster-dev-controller): desired 1, template v3, block cr-0123456789abcdef0 active "
        "2026-11-30T12:00:00Z .. 2026-12-07T12:00:00Z",
        "  i-0c000000000000001  10.0.1.5  ip-10-0-1-5  InService/Healthy  v3  boot ok  slurm idle"
        "  health healthy (2026-12-01T11:58:00Z)",
        "    image ami-0a1b2c3d4e5f60718  kernel 6.8.0-1015-aws  manifest none",
        "    network nodes: nn-0a1b2c3d4e5f60001 > nn-0a1b2c3d4e5f60011 > nn-0a1b2c3d4e5f60111",
        "validation gate: NO-GO (run 20261201-1130); blamed: ip-10-0-1-6",
    ]
    assert clock.sleeps == [2.0, 2.0]  # bounded polling of the SSM invocation
    assert "gpu-cluster status' on i-0c000000000000001: Pending (0s)" in err


REPAIR = {
    "policy": "auto",
    "out": ["ip-10-0-1-9"],
    "isolated": {},
    "waiting": {"ip-10-0-1-6": "waiting: job(s) 41 still running; requeued 5 min after the drain"},
    "history": [
        {
            "time": "2026-12-01T11:40:00Z",
            "node": "ip-10-0-1-9",
            "action": "replaced",
            "detail": "terminated i-0e000000000000009 in gpu-cluster-dev-block-a without decrementing its capacity",
        },
        {
            "time": "2026-12-01T11:57:30Z",
            "node": "ip-10-0-1-6",
            "action": "drained",
            "detail": "health (replace): gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)",
        },
    ],
}


def test_status_shows_the_repair_agent_per_node_and_for_the_cluster(tmp_path):
    aws = Aws()
    stub_cluster(aws, {**REMOTE, "repair": REPAIR})
    rc, out, _, _ = run(aws, tmp_path)
    assert rc == 1  # REMOTE: a NO-GO gate and a failed boot
    lines = out.splitlines()
    i = lines.index("    health failed: efa devices 31 of 32 (/sys/class/infiniband)")
    assert lines[i + 1 : i + 3] == [
        "    repair: waiting: job(s) 41 still running; requeued 5 min after the drain",
        "    repair 2026-12-01T11:57:30Z: drained: health (replace): gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)",
    ]
    assert lines[-3:] == [
        "repair: policy auto; out: ip-10-0-1-9; isolated: none",
        "  2026-12-01T11:40:00Z ip-10-0-1-9 replaced: terminated i-0e000000000000009 in gpu-cluster-dev-block-a "
        "without decrementing its capacity",
        "  2026-12-01T11:57:30Z ip-10-0-1-6 drained: health (replace): gpu-cluster health: gpu count 7 of 8 "
        "(nvidia-smi -L)",
    ]


def test_status_program_reads_the_repair_record(tmp_path):
    """FSX_ROOT/repair as nodeside/repair.py writes it, read by cluster_status.py."""
    from nodeside import cluster_status

    (tmp_path / "repair").mkdir()
    state = {
        "replacements": [{"node": "n1", "back": None}, {"node": "n0", "back": 1}],
        "isolated": {"n4": {"why": "failed again within 1440 min of replacing n1"}},
        "said": {"n2": "deferred: 1 node(s) out already (n1)"},
    }
    (tmp_path / "repair" / "state.json").write_text(json.dumps(state))
    (tmp_path / "repair" / "history.jsonl").write_text('{"node": "n1", "action": "replaced"}\nnot json\n')
    env = tmp_path / "cluster.env"
    env.write_text("CLUSTER_NAME=dev\nREPAIR_POLICY=replace\n")
    got = cluster_status.repair(str(tmp_path), str(env))
    assert got == {
        "policy": "replace",
        "out": ["n1"],
        "isolated": {"n4": "failed again within 1440 min of replacing n1"},
        "waiting": {"n2": "deferred: 1 node(s) out already (n1)"},
        "history": [{"node": "n1", "action": "replaced"}],
    }
    none = cluster_status.repair(str(tmp_path / "nothing"), str(tmp_path / "none.env"))
    assert none["policy"] == "unknown" and none["history"] == [] and "state_error" in none


def test_status_names_an_extended_block_and_prints_the_stack_edit(tmp_path):
    """The block a stack declares ends earlier than EC2 says (extended since `pulumi up`)."""
    start, end = datetime(2026, 11, 30, 11, 30, tzinfo=UTC), datetime(2026, 12, 14, 11, 30, tzinfo=UTC)
    aws = Aws()
    stub_cluster(aws, REMOTE, reservation(start=start, end=end))
    rc, out, _, _ = run(aws, tmp_path, start="2026-11-30T11:30:00Z", end="2026-12-07T11:30:00Z")
    assert rc == 1  # REMOTE's NO-GO gate
    p = "gpu-cluster:cluster.capacity.capacity_blocks[0].end"
    assert out.splitlines()[-1] == (
        f"stack file: {p}: block {CR} was extended: EC2 says it ends at 2026-12-14T11:30:00Z, the stack file "
        "2026-12-07T11:30:00Z; until the stack file says so the group scales in and Slurm drains the block at the "
        "old end. Declare the new end, then `pulumi up` (running nodes learn it without a restart): pulumi config "
        f"set --stack dev --path '{p}' '2026-12-14T11:30:00Z' (or in the stack file: end: '2026-12-14T11:30:00Z')"
    )
    # Dates that match EC2's record: nothing to say.
    aws = Aws()
    stub_cluster(aws, REMOTE, reservation(start=start, end=end))
    rc, out, _, _ = run(aws, tmp_path, "--json", start="2026-11-30T11:30:00Z", end="2026-12-14T11:30:00Z")
    assert rc == 1 and json.loads(out)["declared_dates"] == []


GO_REMOTE = {
    **REMOTE,
    "markers": {"ip-10-0-1-5": {"state": "ok", "step": "90-done"}, "ip-10-0-1-6": {"state": "ok", "step": "95-x"}},
    "validation": {"verdict": "GO", "run_id": "20261201-1130", "blamed_nodes": [], "reasons": []},
}


@pytest.mark.parametrize(
    "remote, rc, why",
    [
        (GO_REMOTE, 0, None),
        ({**GO_REMOTE, "validation": REMOTE["validation"]}, 1, "status: the validation gate is NO-GO"),
        ({**GO_REMOTE, "markers": REMOTE["markers"]}, 1, "status: boot failed on ip-10-0-1-6 at 40-fsx"),
    ],
)
def test_status_exits_1_on_a_nogo_gate_or_a_failed_boot(tmp_path, remote, rc, why):
    aws = Aws()
    stub_cluster(aws, remote)
    got, _, err, _ = run(aws, tmp_path)
    assert got == rc
    assert (err.splitlines()[-1] if why else "status:" not in err) == (why or True)


def test_status_json_and_ssm_failure_is_reported_and_exits_3(tmp_path):
    aws = Aws()
    stub_cluster(aws, None)
    stub_ssm(aws, CTRL, status_script("dev"), "gpu-cluster status", 120, "", status="Failed", code=127)
    rc, out, err, _ = run(aws, tmp_path, "--json")
    doc = json.loads(out)
    assert rc == 3  # the gate and the boot markers could not be read
    assert err.splitlines()[-1] == "status: node status and the gate are unknown (the controller could not be read)"
    assert doc["validation"] is None
    assert doc["ssm_error"] == "status script on the controller: Failed (exit 127): "
    w = doc["groups"][0]["instances"][0]
    assert w == {
        "instance_id": W1,
        "private_ip": "10.0.1.6",
        "node": "ip-10-0-1-6",
        "lifecycle": "InService",
        "health": "Unhealthy",
        "ec2_state": "running",
        "launch_template_version": "2",
        "boot": None,
        "boot_step": None,
        "slurm": None,
        "drain_reason": None,
        "health_state": None,
        "health_time": None,
        "health_failed": [],
        "image_id": "ami-0a1b2c3d4e5f60718",
        "kernel": None,
        "image_manifest": None,
        "drift": [],
        "repair": {"state": None, "actions": []},
        "network_nodes": None,
        "topology_flat_reason": None,
    }
    assert doc["repair"] is None  # nothing read from the controller
    assert doc["declared_dates"] == [] and doc["pinned_image"] is None
    assert doc["groups"][1]["block"] == {
        "id": CR,
        "state": "active",
        "start": "2026-11-30T12:00:00Z",
        "end": "2026-12-07T12:00:00Z",
    }


def test_status_of_a_copied_stack_reads_only_its_own_groups(tmp_path):
    """Pulumi.staging.yaml copied from dev keeps `name: dev`: both clusters carry the tag
    GpuClusterName=dev, only the group names (from the stack) tell them apart."""
    stack_dir(tmp_path)
    (tmp_path / "Pulumi.dev.yaml").rename(tmp_path / "Pulumi.staging.yaml")
    other = "i-0d000000000000009"
    aws = Aws()
    aws.stub("autoscaling").add_response(
        "describe_auto_scaling_groups",
        {
            "AutoScalingGroups": [
                asg("controller", [asg_instance(other)], block=None),
                asg("controller", [asg_instance(CTRL)], block=None, base="staging"),
            ]
        },
        TAG_FILTER,
    )
    # The stack declares block a: status compares its dates with EC2's (none declared here).
    aws.stub("ec2").add_response(
        "describe_capacity_reservations", {"CapacityReservations": [reservation()]}, {"CapacityReservationIds": [CR]}
    )
    aws.stub("ec2").add_response(
        "describe_instances",
        {"Reservations": [{"Instances": [ec2_instance(CTRL, "10.0.1.5", "controller")]}]},
        {"InstanceIds": [CTRL]},
    )
    stub_controller(aws, CTRL, base="staging")
    stub_ssm(aws, CTRL, status_script("dev"), "gpu-cluster status", 120, f"{STATUS_BEGIN}\n{json.dumps(GO_REMOTE)}\n")
    ctx = context(aws, clock=FakeClock())
    rc = main(["status", "--stack", "staging", "--stack-dir", str(tmp_path)], ctx=ctx, session_for=aws.session)
    aws.done()
    out = ctx.out.getvalue().splitlines()
    assert rc == 0, ctx.err.getvalue()
    assert out[1] == "group controller (gpu-cluster-staging-controller): desired 1, template v3, on-demand"
    assert out[2] == (
        "  i-0c000000000000001  10.0.1.5  ip-10-0-1-5  InService/Healthy  v3  boot ok  slurm idle"
        "  health healthy (2026-12-01T11:58:00Z)"
    )
    assert other not in ctx.out.getvalue()


def test_status_without_groups_says_so(tmp_path):
    aws = Aws()
    aws.stub("autoscaling").add_response("describe_auto_scaling_groups", {"AutoScalingGroups": []}, TAG_FILTER)
    rc, _, err, _ = run(aws, tmp_path)
    assert rc == 1
    assert err.strip().splitlines()[-1] == (
        "gpu-cluster-ops status: no Auto Scaling group tagged GpuClusterName=dev "
        "in us-east-2; is the stack deployed (pulumi up) in this region?"
    )


def test_status_script_is_valid_python_and_shell():
    import ast

    lines = status_script("dev")
    assert lines[0] == "python3 - /fsx/.gpu-cluster/dev <<'GPU_CLUSTER_PY'" and lines[-1] == "GPU_CLUSTER_PY"
    ast.parse("\n".join(lines[1:-1]))
    assert "GPU_CLUSTER_PY" not in lines[1:-1]  # the here-document's end marker only ends it


def test_status_script_runs_under_sh_and_prints_one_json_document(tmp_path):
    """The exact lines SSM would run, run here by /bin/sh: no /fsx, no validation tool, still one JSON doc."""
    import subprocess

    r = subprocess.run(
        ["/bin/sh", "-c", "\n".join(status_script("dev"))],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": str(tmp_path) + ":/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout.split(STATUS_BEGIN, 1)[1])
    assert doc["markers"] == {} and doc["health"] == {} and doc["reasons"] == {} and doc["topology"] == {}
    assert doc["validation"]["verdict"] == "UNKNOWN"


def test_expired_block_shows_in_status_without_ssm(tmp_path):
    from datetime import timedelta

    from tests.support.ops_stubs import NOW

    aws = Aws()
    a, ec2 = aws.stub("autoscaling"), aws.stub("ec2")
    a.add_response(
        "describe_auto_scaling_groups", {"AutoScalingGroups": [asg("controller", [], desired=0)]}, TAG_FILTER
    )
    ec2.add_response(
        "describe_capacity_reservations",
        {
            "CapacityReservations": [
                reservation(state="expired", start=NOW - timedelta(days=8), end=NOW - timedelta(days=1))
            ]
        },
        {"CapacityReservationIds": [CR]},
    )
    rc, out, _, _ = run(aws, tmp_path, "--no-ssm")
    assert rc == 0
    assert out.splitlines() == [
        "cluster dev (us-east-2)",
        "group controller (gpu-cluster-dev-controller): desired 0, template v3, block cr-0123456789abcdef0 expired "
        "2026-11-23T12:00:00Z .. 2026-11-30T12:00:00Z",
        "  (no instances)",
    ]


def test_status_program_summarises_health_records(tmp_path):
    """The records the health program writes on /fsx, as cluster_status.py reads them."""
    from nodeside import cluster_status

    (tmp_path / "health").mkdir()
    record = {
        "node": "ip-10-0-1-6",
        "time": "2026-12-01T11:57:00Z",
        "state": "unhealthy",
        "reason": "gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)",
        "checks": [
            {"check": "gpu-count", "status": "fail", "detail": "gpu count 7 of 8 (nvidia-smi -L)"},
            {"check": "dcgm", "status": "skip", "detail": "dcgmi not installed"},
            {"check": "fsx", "status": "ok", "detail": "/fsx mounted and writable"},
        ],
        "slurm": {"action": "drain"},
    }
    (tmp_path / "health" / "ip-10-0-1-6.json").write_text(json.dumps(record))
    (tmp_path / "health" / "ip-10-0-1-7.json").write_text("{not json")
    got = cluster_status.health(str(tmp_path))
    assert got["ip-10-0-1-6"] == {
        "state": "unhealthy",
        "time": "2026-12-01T11:57:00Z",
        "reason": "gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)",
        "failed": ["gpu count 7 of 8 (nvidia-smi -L)"],
        "skipped": ["dcgm"],
        "slurm_action": "drain",
    }
    assert got["ip-10-0-1-7"]["state"] == "unreadable"


# --- drift: what each node booted from against the pinned image ----------------------------

BAKED = "ami-0b4ce000000000001"


def test_status_flags_nodes_that_differ_from_the_pinned_baked_image(tmp_path):
    import yaml

    from tests.support import baked_image

    m = baked_image.manifest()
    sha = baked_image.digest(m)
    root = stack_dir(tmp_path)
    doc = yaml.safe_load((root / "Pulumi.dev.yaml").read_text())
    doc["config"]["gpu-cluster:cluster"]["image"] = {"ami_id": BAKED}
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump(doc))

    aws = Aws()
    a, ec2 = aws.stub("autoscaling"), aws.stub("ec2")
    a.add_response(
        "describe_auto_scaling_groups",
        {"AutoScalingGroups": [asg("block-a", [asg_instance(W1)]), asg("controller", [asg_instance(CTRL)])]},
        TAG_FILTER,
    )
    ec2.add_response("describe_capacity_reservations", {"CapacityReservations": [reservation()]},
                     {"CapacityReservationIds": [CR]})  # fmt: skip
    # The controller runs the pinned image; the worker an older, plain one with another kernel.
    ec2.add_response(
        "describe_instances",
        {"Reservations": [{"Instances": [ec2_instance(W1, "10.0.1.6", "block-a"),
                                         ec2_instance(CTRL, "10.0.1.5", "controller", image=BAKED)]}]},
        {"InstanceIds": [W1, CTRL]},
    )  # fmt: skip
    ec2.add_response(
        "describe_images",
        {"Images": [{"ImageId": BAKED, "Name": "gpu-cluster-dev-20261201-120000", "Tags": baked_image.tags(m)}]},
        {"ImageIds": [BAKED], "IncludeDeprecated": True},
    )
    stub_controller(aws, CTRL)
    remote = {
        "markers": {
            "ip-10-0-1-5": {"state": "ok", "step": "99-done", "kernel": baked_image.KERNEL, "image_manifest": sha},
            "ip-10-0-1-6": {"state": "ok", "step": "99-done", "kernel": "6.8.0-1009-aws", "image_manifest": "none"},
        },
        "slurm": {"ip-10-0-1-5": "idle", "ip-10-0-1-6": "idle"},
    }
    stub_ssm(aws, CTRL, status_script("dev"), "gpu-cluster status", 120, f"{STATUS_BEGIN}\n{json.dumps(remote)}\n")
    ctx = context(aws, clock=FakeClock())
    assert main(["status", "--stack", "dev", "--stack-dir", str(root)], ctx=ctx, session_for=aws.session) == 0
    aws.done()
    out = ctx.out.getvalue().splitlines()
    assert out[1] == f"pinned image {BAKED}: baked, kernel {baked_image.KERNEL}, manifest {sha[:12]}"
    w = out.index("  i-0b000000000000002  10.0.1.6  ip-10-0-1-6  InService/Healthy  v3  boot ok  slurm idle  health ?")
    assert out[w + 1 : w + 5] == [
        "    image ami-0a1b2c3d4e5f60718  kernel 6.8.0-1009-aws  manifest none",
        f"    DIFFERS: image ami-0a1b2c3d4e5f60718 is not the pinned {BAKED} (replace the node to move it)",
        f"    DIFFERS: image manifest none is not the pinned image's {sha[:12]}",
        f"    DIFFERS: kernel 6.8.0-1009-aws is not the pinned image's {baked_image.KERNEL} (its Lustre module is for "
        "that one)",
    ]
    c = out.index("  i-0c000000000000001  10.0.1.5  ip-10-0-1-5  InService/Healthy  v3  boot ok  slurm idle  health ?")
    assert out[c + 1] == f"    image {BAKED}  kernel {baked_image.KERNEL}  manifest {sha[:12]}"
    assert not [ln for ln in out[c + 2 :] if ln.startswith("    DIFFERS")]


def test_status_program_reads_the_topology_record(tmp_path):
    """Each node's network nodes as the controller's refresh recorded them (nodes.json)."""
    from nodeside import cluster_status

    (tmp_path / "topology").mkdir()
    (tmp_path / "topology" / "nodes.json").write_text(
        json.dumps(
            {
                "plugin": "tree",
                "nodes": {
                    "ip-10-0-1-5": {"instance_id": "i-1", "network_nodes": ["a", "b", "c"], "flat_reason": None},
                    "ip-10-0-1-6": {"instance_id": None, "network_nodes": None, "flat_reason": "no boot marker"},
                },
            }
        )
    )
    assert cluster_status.topology(str(tmp_path)) == {
        "ip-10-0-1-5": {"network_nodes": ["a", "b", "c"], "flat_reason": None},
        "ip-10-0-1-6": {"network_nodes": None, "flat_reason": "no boot marker"},
    }
    (tmp_path / "topology" / "nodes.json").write_text("{not json")
    assert cluster_status.topology(str(tmp_path)) == {}
