"""The repair agent's decisions, as timelines: which drains it acts on, when, and its limits.

Slurm is a table (tests/support/repair_world.py), /fsx a temporary directory, time an
input; the AWS call is replaced by a recorder here (its requests and AWS's refusals are
tests/nodeside/test_repair_aws.py, with botocore's Stubber).
"""

from __future__ import annotations

import json

import pytest

from nodeside import repair
from tests.support.repair_world import HOUR, FakeSlurm, World

GPU = ("gpu-count", "gpu count 7 of 8 (nvidia-smi -L)", "replace")
FSX = ("fsx", "/fsx not writable: Read-only file system (/fsx/.gpu-cluster/demo/health/.probe-n1)", "reset")
NVME = ("nvme", "/opt/dlami/nvme 2.0% free, below 5% (statvfs)", "isolate")


@pytest.fixture
def world(tmp_path, monkeypatch):
    w = World(tmp_path / "fsx", FakeSlurm())
    monkeypatch.setattr(repair, "terminate_instance", w.fake_terminate)
    for i, node in enumerate(("ctl", "n1", "n2", "n3")):
        w.slurm.add(node, block="a")
        w.marker(node, f"i-0{i}aaaaaaaaaaaaaaa")
    return w


def health_drain(w: World, node: str, *failed) -> str:
    w.health(node, *failed)
    reason = "gpu-cluster health: " + failed[0][1]
    w.slurm.drain(node, reason)
    return reason


def history(w: World) -> list[tuple[str, str]]:
    path = w.root / "repair" / "history.jsonl"
    return [(h["node"], h["action"]) for h in map(json.loads, path.read_text().splitlines())]


@pytest.mark.parametrize(
    ("reason", "record", "want"),
    [
        ("gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)", [GPU], ("health", "replace")),
        ("gpu-cluster health: /fsx not writable", [FSX], ("health", "reset")),
        ("gpu-cluster health: gpu count 7 of 8 (+1 more: fsx)", [FSX, GPU], ("health", "replace")),
        ("gpu-cluster health: /opt/dlami/nvme 2.0% free", [NVME], None),  # the operator cleans up
        ("gpu-cluster health: gpu count 7 of 8", None, None),  # no record: no evidence of the class
        ("gpu-cluster validation: all_reduce_perf busbw 120 GB/s below 300", None, ("gate", "replace")),
        ("gpu-cluster join gate: nccl pair NO-GO with n1: busbw 12 GB/s", None, ("gate", "replace")),
        ("gpu-cluster join gate: pending (registered into a running cluster)", None, None),
        ("gpu-cluster join gate: sbatch failed: Invalid account", None, None),
        ("gpu-cluster join gate: timed out after 30 min (job 7 PENDING); log /fsx/x", None, None),
        ("gpu-cluster join gate: job 7 ended without a report; log /fsx/x", None, None),
        ("gpu-cluster dcgm: level 2: Memory test Fail on GPU 3", None, ("dcgm", "replace")),
        ("replacing: flaky NIC (ops replace)", None, None),
        ("capacity block a ends 2026-12-08T11:30:00Z (EC2 terminates at 2026-12-08T11:00:00Z)", None, None),
        ("gpu-cluster boot failed at 30-fsx: mount timed out; log /var/log/gpu-cluster/boot.log", None, None),
        ("maintenance by alice", None, None),
    ],
)
def test_only_hardware_drains_are_acted_on(reason, record, want):
    checks = [{"check": c, "status": "fail", "detail": d, "action": a} for c, d, a in record] if record else None
    fault = repair.classify(reason, {"checks": checks} if checks else None)
    assert (None if fault is None else (fault.source, fault.cls)) == want


def test_a_hardware_drain_without_jobs_is_replaced_through_its_group(world):
    reason = health_drain(world, "n1", GPU)
    agent = world.tick(world.settings())
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa"]
    assert world.slurm.calls == [f"reason n1 gpu-cluster repair: replaced i-01aaaaaaaaaaaaaaa: {reason}"]
    assert history(world) == [("n1", "drained"), ("n1", "replaced")]
    assert "terminated i-01aaaaaaaaaaaaaaa in gpu-cluster-demo-a without decrementing" in agent.lines[-1]
    # the next passes do nothing more for n1; once its instance is gone it leaves Slurm
    world.now += 60
    world.tick(world.settings())
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa"]
    world.slurm.gone("n1")
    world.now += 60
    world.tick(world.settings())
    assert world.slurm.calls[-1] == "delete n1" and "n1" not in world.slurm.nodes_


def test_running_jobs_get_the_grace_then_are_requeued_then_the_node_is_replaced(world):
    world.slurm.jobs_["n1"] = ["41", "42"]
    health_drain(world, "n1", GPU)
    s = world.settings(job_grace=300)
    world.tick(s)
    world.now += 60
    world.tick(s)
    assert world.terminated == [] and world.slurm.calls == []
    assert history(world) == [("n1", "drained"), ("n1", "waiting")]  # said once, not every pass
    world.now += 240
    world.tick(s)
    assert world.slurm.calls == ["requeue 41", "requeue 42"] and world.terminated == []
    world.now += 30
    world.tick(s)
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa"]


def test_a_job_that_cannot_be_requeued_keeps_the_node_until_it_ends(world):
    world.slurm.jobs_["n1"] = ["50"]
    world.slurm.not_requeueable.add("50")
    health_drain(world, "n1", GPU)
    s = world.settings(job_grace=0)
    world.tick(s)
    assert world.terminated == [] and "cannot be requeued" in world.tick(s).state["said"]["n1"]
    world.slurm.jobs_["n1"] = []  # it ended
    world.now += 60
    world.tick(s)
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa"]


def test_auto_gives_a_reset_class_fault_its_grace_replace_does_not(world):
    health_drain(world, "n1", FSX)
    world.tick(world.settings(policy="auto", reset_grace=1800))
    world.now += 1799
    world.tick(world.settings(policy="auto", reset_grace=1800))
    assert world.terminated == []
    world.now += 1
    world.tick(world.settings(policy="auto", reset_grace=1800))
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa"]
    health_drain(world, "n2", FSX)
    world.tick(world.settings(policy="replace"))
    assert world.terminated[-1] == "i-02aaaaaaaaaaaaaaa"


def test_a_node_that_recovers_within_the_grace_is_left_to_the_health_program(world):
    health_drain(world, "n1", FSX)
    world.tick(world.settings())
    world.slurm.add("n1", "idle")  # the health program resumed its own drain
    world.now += 3600
    agent = world.tick(world.settings())
    assert world.terminated == [] and "n1" not in agent.state["drains"]


def test_never_more_than_max_out_and_never_more_than_max_per_hour(world):
    for n in ("n1", "n2", "n3"):
        health_drain(world, n, GPU)
    s = world.settings(max_out=1, max_per_hour=2)
    agent = world.tick(s)
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa"]
    assert "1 node(s) out already (n1)" in agent.state["said"]["n2"]
    # n1's successor registers (drained by the join gate), then passes it
    world.slurm.gone("n1")
    world.slurm.add("n4", "drained", "gpu-cluster join gate: pending (registered into a running cluster)")
    world.now += 600
    world.tick(s)
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa"]
    world.slurm.add("n4", "idle")
    world.now += 60
    world.tick(s)
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa", "i-02aaaaaaaaaaaaaaa"]
    # n2's successor is back quickly, but two replacements in the hour is the limit
    world.slurm.add("n5", "idle")
    world.now += 60
    agent = world.tick(s)
    assert len(world.terminated) == 2
    assert "2 replacement(s) in the last hour" in agent.state["said"]["n3"]
    world.now += HOUR
    world.tick(s)
    assert world.terminated[-1] == "i-03aaaaaaaaaaaaaaa"
    assert ("n4", "successor") in history(world) and ("n4", "back") in history(world)


def test_a_successor_that_fails_again_within_the_window_is_isolated_not_replaced(world):
    health_drain(world, "n1", GPU)
    s = world.settings(repeat_window=2 * HOUR, max_per_hour=10)
    world.tick(s)
    world.slurm.gone("n1")
    world.slurm.add("n4", "idle")
    world.now += 600
    world.tick(s)
    world.marker("n4", "i-04aaaaaaaaaaaaaaa")
    reason = health_drain(world, "n4", GPU)
    world.now += 600
    agent = world.tick(s)
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa"]
    assert world.slurm.nodes_["n4"].reason.startswith("gpu-cluster repair: isolated (failed again within 120 min")
    assert world.slurm.nodes_["n4"].reason.endswith(reason[:60]) or reason[:60] in world.slurm.nodes_["n4"].reason
    assert "n4" in agent.state["isolated"] and history(world)[-1] == ("n4", "isolated")
    # it stays isolated: no replacement on later passes
    world.now += 3 * HOUR
    world.tick(s)
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa"]


def test_a_successor_failing_after_the_window_is_replaced_again(world):
    health_drain(world, "n1", GPU)
    s = world.settings(repeat_window=HOUR)
    world.tick(s)
    world.slurm.gone("n1")
    world.slurm.add("n4", "idle")
    world.now += 600
    world.tick(s)
    world.marker("n4", "i-04aaaaaaaaaaaaaaa")
    world.now += 2 * HOUR
    health_drain(world, "n4", GPU)
    world.tick(s)
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa", "i-04aaaaaaaaaaaaaaa"]


def test_a_successor_the_join_gate_fails_counts_as_failing_again(world):
    health_drain(world, "n1", GPU)
    world.tick(world.settings())
    world.slurm.add("n4", "drained", "gpu-cluster join gate: pending (registered into a running cluster)")
    world.now += 120
    world.tick(world.settings())
    world.slurm.add("n4", "drained", "gpu-cluster join gate: nccl pair NO-GO with n2: busbw 10 GB/s")
    world.now += 600
    world.tick(world.settings())
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa"]
    assert world.slurm.nodes_["n4"].reason.startswith("gpu-cluster repair: isolated")


def test_nothing_is_replaced_inside_a_block_end_window(world):
    world.block_end("a", "2027-01-15T11:30:00Z")  # 1_800_000_000 is 2027-01-15T08:00:00Z
    health_drain(world, "n1", GPU)
    s = world.settings()
    world.now = 1_800_000_000 + 2 * HOUR  # 10:00: the window opens at 10:50 (margin 40 min)
    world.tick(s)
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa"]
    health_drain(world, "n2", GPU)
    world.now = 1_800_000_000 + 2 * HOUR + 50 * 60
    agent = world.tick(s)
    assert world.terminated == ["i-01aaaaaaaaaaaaaaa"]
    assert "capacity block a is inside its end window (ends 2027-01-15T11:30:00Z)" in agent.state["said"]["n2"]


def test_isolate_renames_the_drain_and_calls_no_aws(world):
    reason = health_drain(world, "n1", GPU)
    world.tick(world.settings(policy="isolate"))
    assert world.terminated == []
    assert (
        world.slurm.nodes_["n1"].reason
        == f"gpu-cluster repair: isolated (repair.policy isolate (health, replace)): {reason}"[:250]
    )
    # an operator resumes it: the agent forgets the isolation
    world.slurm.add("n1", "idle")
    world.now += 60
    assert "n1" not in world.tick(world.settings(policy="isolate")).state["isolated"]


def test_other_drains_and_the_controller_itself_are_left_alone(world):
    world.slurm.drain("n1", "maintenance by alice")
    world.slurm.drain("n2", "replacing: flaky NIC (ops replace)")
    health_drain(world, "ctl", GPU)
    agent = world.tick(world.settings(policy="replace"))
    assert world.terminated == [] and world.slurm.calls == []
    assert "this is the controller itself" in agent.state["said"]["ctl"]


def test_a_node_without_an_instance_id_is_reported(world):
    (world.root / "status" / "n1.json").unlink()
    health_drain(world, "n1", GPU)
    agent = world.tick(world.settings())
    assert world.terminated == [] and "no instance id" in agent.state["said"]["n1"]


def test_sinfo_not_answering_changes_nothing(world):
    health_drain(world, "n1", GPU)
    world.slurm.answering = False
    agent = world.tick(world.settings())
    assert world.terminated == [] and agent.lines == ["repair: sinfo did not answer; nothing done this pass"]


def test_parse_sinfo_reads_states_blocks_and_reasons():
    text = (
        "n1|drained|block-a,p5.48xlarge|gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)\n"
        "n1|drained|block-a,p5.48xlarge|gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)\n"
        "n2|idle*|block-b|none\n"
        "n3|down*|block-b|Not responding\n"
    )
    nodes = repair.parse_sinfo(text)
    assert nodes["n1"].drained and nodes["n1"].block == "a" and nodes["n1"].reason.endswith("(nvidia-smi -L)")
    assert not nodes["n2"].responding and nodes["n2"].reason == "" and nodes["n2"].block == "b"
    assert nodes["n3"].drained and not nodes["n3"].responding


def test_settings_from_the_environment():
    s = repair.Settings.from_env(
        {
            "REPAIR_POLICY": "replace",
            "REPAIR_MAX_PER_HOUR": "3",
            "REPAIR_MAX_OUT": "1",
            "REPAIR_REPEAT_WINDOW_MINUTES": "60",
            "REPAIR_RESET_GRACE_MINUTES": "0",
            "REPAIR_JOB_GRACE_MINUTES": "1",
            "BLOCK_END_MARGIN_MINUTES": "45",
            "FSX_ROOT": "/fsx/.gpu-cluster/demo",
            "NODE_NAME": "ip-10-0-1-5",
        }
    )
    assert (s.policy, s.max_per_hour, s.max_out, s.repeat_window, s.reset_grace, s.job_grace) == (
        "replace",
        3,
        1,
        3600,
        0,
        60,
    )
    assert s.block_end_margin == 45 * 60 and s.health_records == "/fsx/.gpu-cluster/demo/health"
    assert s.repair_dir == "/fsx/.gpu-cluster/demo/repair" and s.self_node == "ip-10-0-1-5"
    assert repair.Settings.from_env({}).policy == "none"


def test_summary_shows_what_is_out_isolated_and_the_history(world):
    health_drain(world, "n1", GPU)
    health_drain(world, "n2", GPU)
    world.tick(world.settings(max_out=1))
    got = repair.summary(str(world.root / "repair"), "auto")
    assert got["policy"] == "auto" and got["out"] == ["n1"]
    assert [(h["node"], h["action"]) for h in got["history"]] == history(world)
    assert "max_nodes_out" in got["waiting"]["n2"]
