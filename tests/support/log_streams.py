"""CloudWatch Logs answers for `ops logs` (botocore's Stubber checks both sides against
the service model): a node's streams and their events, as step 25's agent writes them
(`<node>/<instance id>/<log>`, model/logs.py). Shared by the command's tests and the
deployer policy's test."""

from __future__ import annotations

GROUP = "/gpu-cluster/dev"
NODE = "ip-10-0-1-6"
OLD, NEW = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2"  # two instances that carried the name
T0 = 1_796_083_200_000  # 2026-12-01T00:00:00Z in ms


def streams(node: str = NODE) -> list[str]:
    return [f"{node}/{iid}/{log}" for iid in (OLD, NEW) for log in ("boot", "cloud-init", "slurmd")]


def event(stream: str, seconds: int, message: str) -> dict:
    return {
        "logStreamName": stream,
        "timestamp": T0 + seconds * 1000,
        "message": message,
        "ingestionTime": T0 + seconds * 1000 + 500,
        "eventId": f"{seconds:056d}",
    }


FAILED_BOOT = [
    event(f"{NODE}/{OLD}/boot", 1, "2026-12-01T00:00:01Z [boot] start 50-slurm"),
    event(f"{NODE}/{OLD}/boot", 5, "2026-12-01T00:00:05Z [50-slurm] waiting up to 1800s for slurmctld"),
    event(
        f"{NODE}/{OLD}/boot",
        9,
        "2026-12-01T00:30:05Z [boot] FAILED 50-slurm after 1800s: timed out after 1800s waiting for slurmctld "
        "(see /var/log/gpu-cluster/boot.log)",
    ),
]


def stub_streams(aws, node: str = NODE, names: list[str] | None = None, prefix: bool = True) -> None:
    params: dict = {"logGroupName": GROUP}
    if prefix:
        params["logStreamNamePrefix"] = f"{node}/"
    names = streams(node) if names is None else names
    half = len(names) // 2
    aws.stub("logs").add_response(
        "describe_log_streams",
        {"logStreams": [{"logStreamName": n} for n in names[:half]], "nextToken": "page2"},
        params,
    )
    aws.stub("logs").add_response(
        "describe_log_streams",
        {"logStreams": [{"logStreamName": n} for n in names[half:]]},
        {**params, "nextToken": "page2"},
    )


def stub_events(aws, names: list[str], events: list[dict], **params) -> None:
    aws.stub("logs").add_response(
        "filter_log_events", {"events": events}, {"logGroupName": GROUP, "logStreamNames": names, **params}
    )
