"""`gpu-cluster-ops logs NODE`: a node's logs from CloudWatch Logs (botocore's Stubber).

The streams are found by the node name's prefix (every instance that carried the name)
or, for an instance id, among the group's streams; `--step` reads the boot streams with
the step's name as the filter pattern; a boot whose last verdict is FAILED exits 1 after
printing; no stream at all, or AWS refusing, exits 3; bad input exits 2 before any call.
"""

from __future__ import annotations

import json

import pytest

from ops.cli import main
from tests.support.log_streams import FAILED_BOOT, GROUP, NEW, NODE, OLD, T0, event, streams, stub_events, stub_streams
from tests.support.ops_stubs import Aws, FakeClock, context
from tests.support.status_stack import stack_dir


def run(tmp_path, aws, *argv: str):
    ctx = context(aws, clock=FakeClock())
    rc = main(
        ["logs", *argv, "--stack", "dev", "--stack-dir", str(stack_dir(tmp_path))], ctx=ctx, session_for=aws.session
    )
    aws.done()
    return rc, ctx.out.getvalue(), ctx.err.getvalue()


def test_every_stream_of_the_node_name_oldest_line_first(tmp_path):
    aws = Aws()
    stub_streams(aws)
    lines = [
        event(f"{NODE}/{NEW}/slurmd", 20, "[2026-12-01T00:00:20.000] slurmd started"),
        event(f"{NODE}/{NEW}/boot", 12, "2026-12-01T00:00:12Z [boot] all 13 step(s) ok"),
        event(f"{NODE}/{OLD}/boot", 3, "2026-12-01T00:00:03Z [boot] start 10-identity"),
    ]
    stub_events(aws, sorted(streams()), lines)
    rc, out, err = run(tmp_path, aws, NODE)
    assert (rc, err) == (0, "")
    assert out.splitlines() == [
        f"2026-12-01T00:00:03Z {OLD}/boot 2026-12-01T00:00:03Z [boot] start 10-identity",
        f"2026-12-01T00:00:12Z {NEW}/boot 2026-12-01T00:00:12Z [boot] all 13 step(s) ok",
        f"2026-12-01T00:00:20Z {NEW}/slurmd [2026-12-01T00:00:20.000] slurmd started",
    ]


def test_step_reads_the_boot_streams_filtered_by_the_step_and_a_failed_boot_exits_1(tmp_path):
    aws = Aws()
    stub_streams(aws)
    boots = [f"{NODE}/{iid}/boot" for iid in (OLD, NEW)]
    stub_events(aws, boots, FAILED_BOOT, filterPattern='"50-slurm"')
    rc, out, err = run(tmp_path, aws, NODE, "--step", "slurm")  # the entry point's short form
    assert rc == 1
    assert len(out.splitlines()) == 3 and "FAILED 50-slurm after 1800s" in out.splitlines()[-1]
    assert err == (
        "gpu-cluster-ops logs: the boot shown failed: FAILED 50-slurm after 1800s: timed out after 1800s "
        "waiting for slurmctld (see /var/log/gpu-cluster/boot.log)\n"
    )


def test_an_instance_id_finds_its_own_streams_and_since_bounds_the_time(tmp_path):
    aws = Aws()
    others = ["ip-10-0-1-7/i-0ccccccccccccccc3/boot"]
    stub_streams(aws, names=[*streams(), *others], prefix=False)
    mine = sorted(n for n in streams() if f"/{NEW}/" in n and n.endswith("/slurmd"))
    now_ms = int(FakeClock().now().timestamp() * 1000)
    stub_events(aws, mine, [event(mine[0], 30, "slurmd up")], startTime=now_ms - 90 * 60_000)
    rc, out, _ = run(tmp_path, aws, NEW, "--log", "slurmd", "--since", "90", "--json")
    assert rc == 0
    assert json.loads(out) == [{"time": T0 + 30_000, "stream": mine[0], "message": "slurmd up"}]


def test_no_stream_under_that_name_is_unreadable_exit_3(tmp_path):
    aws = Aws()
    stub_streams(aws, node="ip-10-0-1-9", names=[])
    rc, out, err = run(tmp_path, aws, "ip-10-0-1-9")
    assert (rc, out) == (3, "")
    assert err.startswith(f"gpu-cluster-ops logs: no log streams of ip-10-0-1-9 in {GROUP}: ")


def test_a_missing_log_group_or_a_refusal_is_exit_3(tmp_path):
    aws = Aws()
    aws.stub("logs").add_client_error(
        "describe_log_streams", "ResourceNotFoundException", "The specified log group does not exist."
    )
    rc, _, err = run(tmp_path, aws, NODE)
    assert rc == 3 and "ResourceNotFoundException" in err and GROUP in err
    aws = Aws()
    aws.stub("logs").add_client_error("describe_log_streams", "AccessDeniedException", "not authorized")
    rc, _, err = run(tmp_path, aws, NODE)
    assert rc == 3 and "access denied to DescribeLogStreams" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["node-7"], "neither a Slurm node name"),
        ([NODE, "--step", "42"], "no boot step '42'; steps are: 10-identity, 20-packages, 25-logs"),
        ([NODE, "--log", "kernel"], "invalid choice: 'kernel'"),
        ([NODE, "--since", "0"], "--since"),
    ],
)
def test_bad_input_is_exit_2_before_any_call(tmp_path, argv, said, capsys):
    aws = Aws()
    with pytest.raises(SystemExit) as e:
        run(tmp_path, aws, *argv)
    assert e.value.code == 2 and said in capsys.readouterr().err
