"""Run a shell script on a node through SSM Run Command and wait for its result.

No SSH anywhere: the nodes run the SSM agent with AmazonSSMManagedInstanceCore.
GetCommandInvocation answers InvocationDoesNotExist for a moment after SendCommand
(the invocation is created asynchronously), so that error means "poll again".
"""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

from clitools import exits
from ops.aws import OpsError, call, error_code
from ops.context import Context

DOCUMENT = "AWS-RunShellScript"
TERMINAL = {"Success", "Cancelled", "TimedOut", "Failed"}


@dataclass(frozen=True)
class CommandResult:
    status: str
    exit_code: int
    stdout: str
    stderr: str


def run_shell(
    ctx: Context, instance_id: str, script: list[str], comment: str, timeout: float = 120.0, poll: float = 2.0
) -> CommandResult:
    """Run `script` (lines) as root on `instance_id`; bounded wait, progress on stderr."""
    ssm = ctx.session.client("ssm")
    sent = call(
        ssm,
        "send_command",
        f"running '{comment}' on {instance_id} through SSM",
        InstanceIds=[instance_id],
        DocumentName=DOCUMENT,
        Comment=comment[:100],
        TimeoutSeconds=max(30, int(timeout)),
        Parameters={"commands": script},
    )
    command_id = sent["Command"]["CommandId"]
    start = ctx.clock.monotonic()
    while True:
        try:
            inv = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
        except ClientError as err:
            if error_code(err) != "InvocationDoesNotExist":
                raise OpsError(
                    f"reading SSM command {command_id} on {instance_id}: {error_code(err)}", exits.UNREACHABLE
                ) from err
            inv = {"Status": "Pending"}
        status = inv["Status"]
        if status in TERMINAL:
            return CommandResult(
                status,
                int(inv.get("ResponseCode", -1)),
                inv.get("StandardOutputContent", ""),
                inv.get("StandardErrorContent", ""),
            )
        elapsed = ctx.clock.monotonic() - start
        if elapsed >= timeout:
            raise OpsError(
                f"SSM command {command_id} ('{comment}') on {instance_id} still {status} after "
                f"{timeout:.0f}s; is the SSM agent online? (aws ssm describe-instance-information)",
                exits.UNREACHABLE,
            )
        ctx.progress(f"  ... '{comment}' on {instance_id}: {status} ({elapsed:.0f}s)")
        ctx.clock.sleep(poll)
