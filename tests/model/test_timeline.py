"""The block's whole life, played against the model of AWS and the engine
(tests/support/timeline.py): explicit counterexamples, one per invariant, then random
timelines (hypothesis)."""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.support.timeline import T0, World, block, cluster, play, project_refresh

CR_A, CR_B, CR_C = "cr-0123456789abcdef0", "cr-0fedcba9876543210", "cr-0aaaaaaaaaaaaaaa0"
H = timedelta(hours=1)
D = timedelta(days=1)
# Blocks start and end at 11:30 UTC; T0 is 2026-12-01T00:00Z.
A_START, A_END = T0 + 11.5 * H, T0 + 2 * D + 11.5 * H
B_START, B_END = T0 + 1 * D + 11.5 * H, T0 + 5 * D + 11.5 * H
C_START, C_END = T0 + 3 * D + 11.5 * H, T0 + 6 * D + 11.5 * H


def _a(count=2, end=A_END):
    return block("a", CR_A, count, A_START, end)


def _b(count=2):
    return block("b", CR_B, count, B_START, B_END)


def _world(refresh=None):
    w = World(project_refresh() if refresh is None else refresh)
    w.buy(CR_A, A_START, A_END)
    w.buy(CR_B, B_START, B_END)
    return w


# --- the model's own rules ----------------------------------------------------------


def test_without_refresh_the_engine_diffs_against_a_stale_size_and_sends_nothing():
    """[TF-ASG]: after a scheduled action resized the group, a stale state hides it."""
    raw_a, raw_b = cluster([_a()]), cluster([_b()])
    events = [(A_START + H, "up", raw_a), (A_END - H / 2, "up", raw_b)]
    stale = play(_world(refresh=False), events, A_END + 6 * H)
    assert any("controller runs 0 of 1" in v for v in stale.violations), stale.violations
    fresh = play(_world(refresh=True), events, A_END + 6 * H)
    assert fresh.violations == []


def test_ignore_changes_stops_the_sizes_being_sent():
    w = World(refresh=True, ignore_changes={"aws:autoscaling/group:Group": {"minSize", "maxSize", "desiredCapacity"}})
    w.buy(CR_A, A_START, A_END)
    w.buy(CR_B, B_START, B_END)
    play(w, [(A_START + H, "up", cluster([_a()])), (A_END - H / 2, "up", cluster([_b()]))], A_END + 6 * H)
    assert any("controller runs 0 of 1" in v for v in w.violations)


def test_tags_do_not_reach_running_instances():
    w = _world()
    raw = cluster([_a()])
    play(w, [(A_START + H, "up", raw)], A_START + 2 * H)
    node = w.groups["gpu-cluster-dev-block-a"].instances[0]
    w.up(A_START + 3 * H, cluster([_a(end=A_END + D)]))  # refused: EC2 still says A_END
    w.extend(CR_A, 1)
    assert w.up(A_START + 3 * H, cluster([_a(end=A_END + D)]))
    assert node.tags["GpuClusterBlockEnd"] == "2026-12-03T11:30:00Z"
    assert w.groups["gpu-cluster-dev-block-a"].tags["GpuClusterBlockEnd"] == "2026-12-04T11:30:00Z"


# --- counterexamples: one per invariant ----------------------------------------------


def test_controller_runs_after_moving_to_a_started_block():
    """An up during block a, a's scale-in, then a move to block b (already started): the
    controller group is declared 1 as before; only a refresh makes the engine send it."""
    events = [(A_START + H, "up", cluster([_a()])), (A_END - H / 2, "up", cluster([_b()]))]
    w = play(_world(), events, A_END + 6 * H)
    assert w.violations == []


def test_a_new_block_reusing_an_old_name_launches_the_whole_cluster():
    w = _world()
    w.buy(CR_C, C_START, C_END)
    reused = block("a", CR_C, 2, C_START, C_END)
    events = [(A_START + H, "up", cluster([_a()])), (C_START + H, "up", cluster([reused]))]
    play(w, events, C_START + 8 * H)
    assert w.violations == []


def test_a_first_up_close_to_the_start_sends_no_past_start_time():
    """The old 10-minute lead: an up 15 minutes before the start created the scale-out
    action after FSx (20 minutes), in the past."""
    w = play(_world(), [(A_START - 15 * timedelta(minutes=1), "up", cluster([_a()]))], A_START + 2 * H)
    assert not [v for v in w.violations if "refuses" in v], w.violations
    assert w.violations == []


def test_the_payload_object_carries_at_most_ten_tags():
    tags = {f"team{i}": "ml" for i in range(10)}  # 10 user tags + the cluster tag = 11
    w = play(_world(), [(A_START - D / 2, "up", cluster([_a()], tags=tags))], A_START)
    assert not [v for v in w.violations if "S3 refuses" in v], w.violations


def test_dropping_the_first_block_terminates_no_worker():
    """The controller's host block is named (controller.block): dropping it from the list
    is refused before anything changes, so no later block's group gives up a worker."""
    events = [
        (A_START + H, "up", cluster([_a(), _b()])),
        (A_END + H, "up", cluster([_b()], controller={"block": "a"})),  # a is over: drop it
    ]
    w = play(_world(), events, A_END + 4 * H)
    assert not [v for v in w.violations if "terminated" in v or "deleted" in v], w.violations


def test_an_implicit_move_of_the_controller_into_a_running_block_terminates_no_worker():
    """[a, b] hosting the controller in a, then b alone (a is over, no host named): b
    would host it and its running group give up a worker. The program reads the live
    controller group (it follows a), refuses the run, and nothing changes."""
    events = [
        (A_START + H, "up", cluster([_a(), _b()])),  # controller hosted by a
        (A_END + H, "up", cluster([_b()])),  # a is over and dropped, no host named: b hosts it
    ]
    w = play(_world(), events, A_END + 4 * H)
    assert not [v for v in w.violations if "terminated" in v], w.violations
    assert w.applied is not None and len(w.applied[1]["capacity"]["capacity_blocks"]) == 2  # refused
    assert len(w.groups["gpu-cluster-dev-block-b"].instances) == 2


def test_a_dedicated_controller_moving_into_a_running_block_is_refused():
    """Back from dedicated to a colocated controller while the only block runs: the block's
    group would give its slot to the controller."""
    w = _world()
    play(w, [(B_START + H, "up", cluster([_b()], controller={"placement": "dedicated"}))], B_START + 2 * H)
    assert not w.up(B_START + 3 * H, cluster([_b()]))
    assert w.preview(B_START + 3 * H, cluster([_b()])) is False


def test_moving_the_controller_into_a_block_that_has_not_started_is_allowed():
    """The host's group is still at zero (its scale-out action is pending): nothing runs
    to terminate, so the move goes through and the controller launches with block b."""
    events = [
        (A_START + H, "up", cluster([_a(), _b()])),
        (A_START + 2 * H, "up", cluster([_a(), _b()], controller={"block": "b"})),
    ]
    w = play(_world(), events, B_START + 4 * H)
    assert w.applied is not None and w.applied[1]["controller"] == {"block": "b"}
    assert not [v for v in w.violations if "terminated" in v], w.violations


def test_dropping_the_first_block_with_a_dedicated_controller_keeps_every_worker():
    dedicated = {"placement": "dedicated"}
    events = [
        (A_START + H, "up", cluster([_a(), _b()], controller=dedicated)),
        (A_END + H, "up", cluster([_b()], controller=dedicated)),
    ]
    w = play(_world(), events, A_END + 4 * H)
    assert w.violations == [], w.violations


def test_no_node_drains_at_its_old_end_after_an_extension():
    w = _world()
    events = [(A_START + H, "up", cluster([_a()])), (A_START + 3 * H, "extend", (CR_A, 1))]
    events.append((A_START + 4 * H, "up", cluster([_a(end=A_END + D)])))
    play(w, events, A_END + D)
    assert not [v for v in w.violations if "old end" in v], w.violations


# --- random timelines --------------------------------------------------------------

# `make check` runs a few (GPU_CLUSTER_TIMELINE_CASES); `make test` the full count.
CASES = int(os.environ.get("GPU_CLUSTER_TIMELINE_CASES", "200"))

_CONFIGS = {
    "a": lambda: cluster([_a()]),
    "ab": lambda: cluster([_a(), _b()]),
    "b": lambda: cluster([_b()]),
    "a-reused": lambda: cluster([block("a", CR_C, 2, C_START, C_END)]),
}
_DEDICATED = {"placement": "dedicated"}
_DEDICATED_CONFIGS = {
    "a": lambda: cluster([_a()], controller=_DEDICATED),
    "ab": lambda: cluster([_a(), _b()], controller=_DEDICATED),
    "b": lambda: cluster([_b()], controller=_DEDICATED),
    "a-reused": lambda: cluster([block("a", CR_C, 2, C_START, C_END)], controller=_DEDICATED),
}


def _ops(configs):
    return st.tuples(
        st.integers(0, 6 * 24 * 4),  # quarter hours after T0
        st.sampled_from(["up", "preview", "fail"]),
        st.sampled_from(configs),
    )


# Moves (to a started block, to a reused name, dropping the first block: "ab" -> "b"
# moves a colocated controller into b, refused while b runs), ups, previews and failures,
# with a colocated and with a dedicated controller.
_OPS = _ops(["a", "ab", "b", "a-reused"])
_DEDICATED_OPS = _ops(["a", "ab", "b", "a-reused"])

OPS_LISTS = st.lists(_OPS, min_size=1, max_size=6)


def play_ops(ops, configs=None) -> World:
    configs = configs or _CONFIGS
    w = _world()
    w.buy(CR_C, C_START, C_END)
    events = []
    for quarter, kind, name in ops:
        t = T0 + quarter * timedelta(minutes=15)
        if kind == "fail":
            events.append(
                (t, "fail", "gpu-cluster-dev-controller" if quarter % 2 else f"gpu-cluster-dev-block-{name[0]}")
            )
        else:
            events.append((t, kind, configs[name]()))
    return play(w, events, T0 + 7 * D)


@seed(17)
@settings(max_examples=CASES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(OPS_LISTS)
def test_random_timelines_keep_every_invariant(ops):
    w = play_ops(ops)
    assert w.violations == [], w.violations


@seed(23)
@settings(max_examples=CASES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_DEDICATED_OPS, min_size=1, max_size=6))
def test_random_timelines_with_a_dedicated_controller_keep_every_invariant(ops):
    w = play_ops(ops, _DEDICATED_CONFIGS)
    assert w.violations == [], w.violations
