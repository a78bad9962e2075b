"""replace NODE: show its jobs, confirm, drain, wait for the jobs, terminate through its
group, wait for the new node idle.

Stages, each reported once as it ends (and in `--json`): resolve, jobs (what runs on the
node: squeue over SSM on the controller), confirm (an answer on a terminal, or `--yes`;
without a terminal and without --yes the replacement is refused), drain, wait (the jobs
end or are requeued within `--wait` minutes; `--force` requeues them at once, cancelling
the ones that cannot be requeued), terminate, new-instance, slurm-idle. Nothing is
changed before confirm; a node with running jobs needs `--wait` or `--force`, so a
replacement never kills a job by surprise. Termination keeps the group's desired capacity
(ShouldDecrementDesiredCapacity=False), so the group launches a replacement from the
same template into the same block. Inside a Capacity Block EC2 needs a few minutes to
clean up the terminated instance before its slot can be reused [CB-LAUNCH], hence the
generous default wait.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from model.tags import CLUSTER as CLUSTER_TAG
from ops.aws import OpsError, call
from ops.cluster import controller_instance, describe_instances, node_ipv4, node_name
from ops.context import Context
from ops.remote import drain_script, force_script, jobs_script, node_state_script
from ops.ssm import run_shell
from userdata import layout

DRAIN_REASON = "gpu-cluster replace"
STAGES = ("resolve", "jobs", "confirm", "drain", "wait", "terminate", "new-instance", "slurm-idle")
# --force: requeued jobs leave the node within seconds; COMPLETING ones (epilog, killed
# steps) within Slurm's KillWait. This bounds the wait after requeueing.
FORCE_WAIT = 300


@dataclass(frozen=True)
class Options:
    drain: bool = True
    yes: bool = False
    wait: float = 0  # seconds the jobs may take to end or be requeued; 0: do not wait
    force: bool = False
    instance_timeout: float = 1800
    idle_timeout: float = 2700
    poll: float = 30


@dataclass
class Stage:
    stage: str
    status: str  # ok | failed | skipped
    detail: str


@dataclass
class Replacement:
    node: str
    stages: list[Stage] = field(default_factory=list)

    def add(self, ctx: Context, stage: str, status: str, detail: str) -> None:
        self.stages.append(Stage(stage, status, detail))
        ctx.progress(f"[{stage}] {status}: {detail}")


def resolve(ctx: Context, cluster: str, node: str) -> tuple[str, str, str]:
    """(instance id, Slurm node name, Auto Scaling group) of `node` (name or instance id)."""
    ec2 = ctx.session.client("ec2")
    filters = [
        {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
    ]
    if node.startswith("i-"):
        page = call(ec2, "describe_instances", f"looking up {node}", InstanceIds=[node])
    else:
        ip = node_ipv4(node)
        if ip is None:
            raise OpsError(f"{node!r} is neither a Slurm node name (ip-10-0-1-5) nor an instance id (i-...)")
        page = call(
            ec2,
            "describe_instances",
            f"looking up {node}",
            Filters=[*filters, {"Name": "private-ip-address", "Values": [ip]}],
        )
    found = [i for r in page["Reservations"] for i in r["Instances"]]
    if not found:
        raise OpsError(f"no running instance of cluster {cluster} is {node}")
    inst = found[0]
    if inst.get("State", {}).get("Name") not in ("pending", "running"):
        raise OpsError(f"{inst['InstanceId']} is {inst.get('State', {}).get('Name')}, not running; nothing to replace")
    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
    if tags.get(CLUSTER_TAG) != cluster:
        raise OpsError(
            f"{inst['InstanceId']} is not a node of cluster {cluster} (tag {CLUSTER_TAG}="
            f"{tags.get(CLUSTER_TAG, 'missing')})"
        )
    asg = tags.get("aws:autoscaling:groupName")
    if not asg:
        page = call(
            ctx.session.client("autoscaling"),
            "describe_auto_scaling_instances",
            f"finding the group of {inst['InstanceId']}",
            InstanceIds=[inst["InstanceId"]],
        )
        asg = next((i["AutoScalingGroupName"] for i in page["AutoScalingInstances"]), None)
    if not asg:
        raise OpsError(f"{inst['InstanceId']} is in no Auto Scaling group; it cannot be replaced through one")
    ip = inst.get("PrivateIpAddress")
    if not ip:
        raise OpsError(f"{inst['InstanceId']} has no private IPv4 yet; wait until it is running")
    return inst["InstanceId"], node_name(ip), asg


def _in_service(ctx: Context, asg: str) -> tuple[list[str], int]:
    page = call(
        ctx.session.client("autoscaling"),
        "describe_auto_scaling_groups",
        f"reading group {asg}",
        AutoScalingGroupNames=[asg],
    )
    if not page["AutoScalingGroups"]:
        raise OpsError(f"Auto Scaling group {asg} disappeared")
    g = page["AutoScalingGroups"][0]
    return [i["InstanceId"] for i in g.get("Instances", []) if i["LifecycleState"] == "InService"], g["DesiredCapacity"]


def _wait_new_instance(ctx: Context, asg: str, old: set[str], timeout: float, poll: float) -> str:
    start = ctx.clock.monotonic()
    while True:
        ids, desired = _in_service(ctx, asg)
        new = sorted(set(ids) - old)
        if new:
            return new[0]
        elapsed = ctx.clock.monotonic() - start
        if elapsed >= timeout:
            raise OpsError(
                f"no new InService instance in {asg} after {elapsed / 60:.0f} min; check the group's "
                f"activities (aws autoscaling describe-scaling-activities --auto-scaling-group-name {asg})"
            )
        ctx.progress(
            f"  ... waiting for a new instance in {asg}: {len(ids)}/{desired} InService ({elapsed / 60:.1f} min)"
        )
        ctx.clock.sleep(poll)


def _wait_idle(ctx: Context, cluster: str, name_base: str, node: str, timeout: float, poll: float) -> str:
    start = ctx.clock.monotonic()
    state = ""
    while True:
        try:
            # Re-resolved each time: the node being replaced may be the controller.
            controller = controller_instance(ctx, name_base)
            res = run_shell(ctx, controller, node_state_script(node), f"sinfo {node}", timeout=60)
            state = res.stdout.strip() if res.status == "Success" else state
        except OpsError as err:
            ctx.progress(f"  ... {err}")
        if state.rstrip("*") in ("idle", "mixed", "allocated"):
            return state
        elapsed = ctx.clock.monotonic() - start
        if elapsed >= timeout:
            raise OpsError(
                f"{node} is '{state or 'not registered'}' in Slurm after {elapsed / 60:.0f} min, not idle; "
                f"read {layout.BOOT_LOG} on it and its marker under "
                f"{layout.fsx_root(cluster)}/status/"
            )
        ctx.progress(
            f"  ... waiting for {node} to be idle in Slurm: {state or 'not registered yet'} ({elapsed / 60:.1f} min)"
        )
        ctx.clock.sleep(poll)


def _jobs(ctx: Context, controller: str, node: str) -> list[str]:
    """Jobs on `node` as `id|user|name|state|time` lines (squeue on the controller)."""
    res = run_shell(ctx, controller, jobs_script(node), f"squeue {node}", timeout=60)
    if res.status != "Success":
        raise OpsError(
            f"listing the jobs on {node} via {controller}: {res.status} (exit {res.exit_code}): "
            f"{(res.stderr or res.stdout).strip()[-300:]}; pass --no-drain to replace it without looking"
        )
    return [line for line in res.stdout.splitlines() if line.strip()]


def _job_summary(jobs: list[str]) -> str:
    if not jobs:
        return "no jobs"
    shown = [" ".join(j.split("|")) for j in jobs[:5]]
    return f"{len(jobs)} job(s): " + "; ".join(shown) + (f"; +{len(jobs) - 5} more" if len(jobs) > 5 else "")


def _confirm(ctx: Context, opts: Options, node: str, instance_id: str, jobs: list[str] | None) -> str:
    """Why the replacement may go ahead; OpsError when it may not (nothing changed yet)."""
    if jobs and not (opts.wait or opts.force):
        raise OpsError(
            f"{len(jobs)} job(s) run on {node}; pass --wait MINUTES to drain and let them end or be "
            "requeued first, or --force to requeue (or cancel) them now"
        )
    if opts.yes:
        return "--yes"
    if not ctx.interactive:
        raise OpsError("no terminal to confirm on; pass --yes to replace without the question")
    then = "requeue or cancel its jobs, " if jobs and opts.force else ("wait for its jobs, " if jobs else "")
    question = f"Drain {node}, {then}terminate {instance_id} and launch a replacement? [y/N] "
    answer = ctx.prompt(question).strip().lower()
    if answer not in ("y", "yes"):
        raise OpsError(f"not confirmed (answer {answer!r}); nothing changed")
    return "confirmed"


def _wait_jobs(ctx: Context, controller: str, node: str, timeout: float, poll: float) -> list[str]:
    """Poll until no job runs on `node`; the jobs still there when the bound is reached."""
    start = ctx.clock.monotonic()
    while True:
        jobs = _jobs(ctx, controller, node)
        elapsed = ctx.clock.monotonic() - start
        if not jobs or elapsed >= timeout:
            return jobs
        ctx.progress(f"  ... waiting for {len(jobs)} job(s) on {node} to end ({elapsed / 60:.1f} min)")
        ctx.clock.sleep(poll)


def _drain_and_wait(ctx: Context, rep: Replacement, opts: Options, controller: str, node: str, jobs: list[str]) -> None:
    res = run_shell(ctx, controller, drain_script(node, DRAIN_REASON), f"drain {node}")
    if res.status != "Success":
        raise OpsError(
            f"draining {node} on {controller}: {res.status} (exit {res.exit_code}): "
            f"{(res.stderr or res.stdout).strip()[-300:]}; pass --no-drain to replace it anyway"
        )
    rep.add(ctx, "drain", "ok", f'{node} drained (reason "{DRAIN_REASON}") via {controller}')
    if not jobs:
        rep.add(ctx, "wait", "skipped", "no jobs on the node")
        return
    how = "ended"
    if opts.force:
        done = run_shell(ctx, controller, force_script(node), f"requeue jobs on {node}", timeout=120)
        how = ", ".join(line.strip() for line in done.stdout.splitlines() if line.strip()) or "requeued"
    left = _wait_jobs(ctx, controller, node, FORCE_WAIT if opts.force else opts.wait, opts.poll)
    if left:
        raise OpsError(
            f"{_job_summary(left)} still on {node}; it stays drained (scontrol update nodename={node} "
            "state=resume to take it back); run again with a longer --wait or with --force"
        )
    rep.add(ctx, "wait", "ok", f"{len(jobs)} job(s) off {node}: {how}")


def _terminate(
    ctx: Context, rep: Replacement, opts: Options, instance_id: str, asg: str, name_base: str, cluster: str
) -> None:
    before, _ = _in_service(ctx, asg)
    act = call(
        ctx.session.client("autoscaling"),
        "terminate_instance_in_auto_scaling_group",
        f"terminating {instance_id}",
        InstanceId=instance_id,
        ShouldDecrementDesiredCapacity=False,
    )
    desc = act["Activity"].get("Description")
    rep.add(ctx, "terminate", "ok", f"{instance_id} terminating" + (f"; {desc}" if desc else ""))
    new_id = _wait_new_instance(ctx, asg, set(before) | {instance_id}, opts.instance_timeout, opts.poll)
    ip = describe_instances(ctx, [new_id]).get(new_id, {}).get("PrivateIpAddress")
    if not ip:
        raise OpsError(f"new instance {new_id} has no private IPv4")
    new_node = node_name(ip)
    rep.add(ctx, "new-instance", "ok", f"{new_id} ({new_node}) InService in {asg}")
    state = _wait_idle(ctx, cluster, name_base, new_node, opts.idle_timeout, opts.poll)
    rep.add(ctx, "slurm-idle", "ok", f"{new_node} is {state} in Slurm")


def replace(
    ctx: Context, cluster: str, node: str, opts: Options | None = None, name_base: str | None = None
) -> Replacement:
    """Replace one node; `name_base` (ClusterConfig.aws_name_base) names the groups."""
    opts = opts or Options()
    name_base = name_base or cluster
    rep = Replacement(node)
    try:
        instance_id, slurm_node, asg = resolve(ctx, cluster, node)
        rep.add(ctx, "resolve", "ok", f"{node} is {instance_id} ({slurm_node}) in {asg}")
        controller, jobs = "", None
        if opts.drain:
            controller = controller_instance(ctx, name_base)
            jobs = _jobs(ctx, controller, slurm_node)
            rep.add(ctx, "jobs", "ok", f"{slurm_node}: {_job_summary(jobs)}")
        else:
            rep.add(ctx, "jobs", "skipped", "--no-drain: the controller is not asked")
        rep.add(ctx, "confirm", "ok", _confirm(ctx, opts, slurm_node, instance_id, jobs))
        if opts.drain:
            _drain_and_wait(ctx, rep, opts, controller, slurm_node, jobs or [])
        else:
            rep.add(ctx, "drain", "skipped", "--no-drain")
            rep.add(ctx, "wait", "skipped", "--no-drain: jobs on the node are not waited for")
        _terminate(ctx, rep, opts, instance_id, asg, name_base, cluster)
    except OpsError as err:
        done = {s.stage for s in rep.stages}
        nxt = next((s for s in STAGES if s not in done), "replace")
        rep.add(ctx, nxt, "failed", str(err))
    return rep


def run(ctx: Context, args: Any, cluster: str, name_base: str | None = None) -> int:
    opts = Options(
        drain=not args.no_drain,
        yes=args.yes,
        wait=args.wait * 60,
        force=args.force,
        instance_timeout=args.instance_timeout * 60,
        idle_timeout=args.idle_timeout * 60,
        poll=args.poll,
    )
    rep = replace(ctx, cluster, args.node, opts, name_base=name_base)
    ok = all(s.status != "failed" for s in rep.stages)
    if args.json:
        ctx.print(json.dumps({"node": rep.node, "ok": ok, "stages": [asdict(s) for s in rep.stages]}, indent=2))
    else:
        for s in rep.stages:
            ctx.print(f"{s.stage}: {s.status}: {s.detail}")
    return 0 if ok else 1
