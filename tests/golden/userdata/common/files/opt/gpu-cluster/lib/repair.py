"""gpu-cluster-repair: the controller's repair agent (repair.policy, docs/health.md).

    repair.py tick      one pass: act on nodes drained for hardware, print one line per action
    repair.py status    the agent's record (state and history) as JSON, for `ops status`

Run by the controller's agent loop (lib/repair.sh repair_tick) with the node's boto3
interpreter (GPU_CLUSTER_AWS_PYTHON), in the loop's environment (cluster.env and
overrides.env exported, identity.env loaded). One pass:

1. Reads every node from sinfo (state, drain reason, features: `block-<name>`), and the
   nodes it knew before, so a node that registers after a replacement in the same block
   is that replacement's successor (the group's slot, which a new instance fills under a
   new name and address).
2. Finds the nodes drained for hardware: by the health program (`gpu-cluster health:`,
   classed by its record's failed checks: action `replace` or `reset`; `isolate`, a full
   NVMe, is the operator's), by a gate (`gpu-cluster validation:` or `gpu-cluster join
   gate:` with a verdict; not `pending`, a failed sbatch or a missing report) or by the
   idle-node DCGM run (`gpu-cluster dcgm:`). Any other drain (an operator, a block end,
   `ops replace`, a failed boot) is never touched; the controller's own node neither.
3. Acts by the policy: `isolate` renames the drain (`gpu-cluster repair: isolated: ...`,
   which the health program does not resume); `auto`/`replace` replace the node through its
   group once its jobs are gone: jobs still running `REPAIR_JOB_GRACE_MINUTES` after the
   drain are requeued (`scontrol requeue`; one that cannot be is waited for), then
   TerminateInstanceInAutoScalingGroup without decrementing the desired capacity
   [ASG-TERMINATE]. The group launches a new instance, which joins drained and takes jobs
   once the join gate passed it.
4. Limits: at most REPAIR_MAX_PER_HOUR replacements in any hour; never more than
   REPAIR_MAX_OUT nodes out at once (replaced, successor not back in service); nothing in a
   block's end window (FSX_ROOT/blocks/<block>.end less BLOCK_END_MARGIN_MINUTES: the block
   ends anyway); a successor drained for hardware within REPAIR_REPEAT_WINDOW_MINUTES of its
   predecessor's replacement is isolated and reported, not replaced again.
5. Records: every action is a line of FSX_ROOT/repair/history.jsonl (time, node, action,
   detail); the agent's memory is FSX_ROOT/repair/state.json (on /fsx, so a replaced
   controller goes on where the old one stopped). A refusal by AWS is recorded with the IAM
   action the role lacks; a denied node is retried after DENIED_BACKOFF, a throttled call at
   the next pass.

Time is an input: `--now EPOCH` (tests); the default is the clock.
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

HEALTH_PREFIX = "gpu-cluster health: "
GATE_PREFIX = "gpu-cluster validation: "
JOIN_PREFIX = "gpu-cluster join gate: "
DCGM_PREFIX = "gpu-cluster dcgm: "
REPAIR_PREFIX = "gpu-cluster repair: "
# join gate reasons that carry no verdict on the hardware (nodeside/lib/join-gate.sh)
JOIN_NO_VERDICT = re.compile(r"^(pending \(|sbatch failed|timed out after|job \d+ ended without a report)")
DENIED_BACKOFF = 1800  # seconds before a node whose replacement AWS refused is tried again
SLURM_TIMEOUT = 30
REASON_MAX = 250  # Slurm keeps reasons short; join-gate.sh cuts at the same length
IN_SERVICE = ("idle", "mixed", "allocated", "completing")


# --- settings -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    policy: str = "none"
    max_per_hour: int = 2
    max_out: int = 2
    repeat_window: int = 1440 * 60  # seconds
    reset_grace: int = 30 * 60
    job_grace: int = 5 * 60
    block_end_margin: int = 40 * 60
    fsx_root: str = "/fsx/.gpu-cluster/cluster"
    health_records: str = ""
    self_node: str = ""

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Settings:
        def num(key: str, default: int) -> int:
            try:
                return int(env.get(key, "") or default)
            except ValueError:
                return default

        fsx_root = env.get("FSX_ROOT", cls.fsx_root)
        return cls(
            policy=env.get("REPAIR_POLICY", "none") or "none",
            max_per_hour=num("REPAIR_MAX_PER_HOUR", 2),
            max_out=num("REPAIR_MAX_OUT", 2),
            repeat_window=num("REPAIR_REPEAT_WINDOW_MINUTES", 1440) * 60,
            reset_grace=num("REPAIR_RESET_GRACE_MINUTES", 30) * 60,
            job_grace=num("REPAIR_JOB_GRACE_MINUTES", 5) * 60,
            block_end_margin=max(31, num("BLOCK_END_MARGIN_MINUTES", 40)) * 60,
            fsx_root=fsx_root,
            health_records=env.get("HEALTH_RECORDS") or os.path.join(fsx_root, "health"),
            self_node=env.get("NODE_NAME", ""),
        )

    @property
    def repair_dir(self) -> str:
        return os.path.join(self.fsx_root, "repair")


# --- what Slurm says ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    name: str
    state: str  # sinfo %T: idle, drained, draining, mixed+drain..., with `*` when not responding
    reason: str
    block: str

    @property
    def drained(self) -> bool:
        return "drain" in self.state or self.state.startswith("down")

    @property
    def responding(self) -> bool:
        return not self.state.endswith("*") and not self.state.startswith("down")

    @property
    def in_service(self) -> bool:
        return self.state.rstrip("*") in IN_SERVICE


def parse_sinfo(text: str) -> dict[str, Node]:
    """`sinfo -h -N -o '%N|%T|%f|%E'` (one line per node and partition) -> nodes by name."""
    out: dict[str, Node] = {}
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) != 4 or not parts[0]:
            continue
        name, state, features, reason = parts
        block = next((f[6:] for f in features.split(",") if f.startswith("block-")), "")
        out[name] = Node(name, state.strip(), "" if reason.strip() == "none" else reason.strip(), block)
    return out


class Slurm:
    """The Slurm clients the agent uses; tests pass a fake with the same methods."""

    def _run(self, *argv: str) -> tuple[int, str]:
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=SLURM_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as e:
            return -1, str(e)
        return r.returncode, (r.stdout if r.returncode == 0 else (r.stderr or r.stdout)).strip()

    def nodes(self) -> dict[str, Node] | None:
        rc, out = self._run("sinfo", "-h", "-N", "-o", "%N|%T|%f|%E")
        return parse_sinfo(out) if rc == 0 else None

    def jobs(self, node: str) -> list[str]:
        """Jobs running (or finishing) on the node."""
        rc, out = self._run("squeue", "-h", "-w", node, "-t", "RUNNING,COMPLETING,CONFIGURING", "-o", "%i")
        return sorted(set(out.split())) if rc == 0 else []

    def requeue(self, job: str) -> str:
        rc, out = self._run("scontrol", "requeue", job)
        return "" if rc == 0 else out or f"exit {rc}"

    def set_reason(self, node: str, reason: str) -> str:
        rc, out = self._run("scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason[:REASON_MAX]}")
        return "" if rc == 0 else out or f"exit {rc}"

    def delete(self, node: str) -> str:
        rc, out = self._run("scontrol", "delete", f"nodename={node}")
        return "" if rc == 0 else out or f"exit {rc}"


# --- reading /fsx --------------------------------------------------------------------------------


def load_json(path: str, default: Any) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def write_json(path: str, data: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def block_end(fsx_root: str, block: str) -> int | None:
    """The block's end (epoch) from FSX_ROOT/blocks/<block>.end (lib/block-end.sh publishes it)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", block or ""):
        return None
    try:
        with open(os.path.join(fsx_root, "blocks", f"{block}.end")) as f:
            text = f.read(100).strip()
        return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))
    except (OSError, ValueError):
        return None


# --- what a drain means --------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """A drain the agent acts on: who drained (`health`, `gate`, `dcgm`) and the class:
    `replace` (the hardware) or `reset` (a reset usually clears it)."""

    source: str
    cls: str
    evidence: str


def _health_class(record: Any) -> str | None:
    if not isinstance(record, dict):
        return None
    actions = {c.get("action") for c in record.get("checks", []) if isinstance(c, dict) and c.get("status") == "fail"}
    if "replace" in actions:
        return "replace"
    if "reset" in actions:
        return "reset"
    return None  # `isolate` only (NVMe full): the operator cleans up, no hardware at fault


def classify(reason: str, health_record: Any) -> Fault | None:
    """The fault behind a drain reason, or None when the drain is not for hardware."""
    if reason.startswith(HEALTH_PREFIX):
        cls = _health_class(health_record)
        return Fault("health", cls, reason) if cls else None
    if reason.startswith(DCGM_PREFIX) or reason.startswith(GATE_PREFIX):
        return Fault("dcgm" if reason.startswith(DCGM_PREFIX) else "gate", "replace", reason)
    if reason.startswith(JOIN_PREFIX):
        verdict = reason[len(JOIN_PREFIX) :]
        return None if JOIN_NO_VERDICT.match(verdict) else Fault("gate", "replace", reason)
    return None


# --- the agent --------------------------------------------------------------------------------------


def _fresh_state() -> dict[str, Any]:
    return {"seen": {}, "drains": {}, "replacements": [], "isolated": {}, "said": {}}


@dataclass
class Agent:
    settings: Settings
    slurm: Any
    now: int
    asg: Any = None  # a boto3 autoscaling client; made on the first terminate when None
    state: dict[str, Any] = field(default_factory=_fresh_state)
    lines: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)

    # ---- records
    def record(self, node: str, action: str, detail: str, **extra: Any) -> None:
        """One action: a history line and a printed line."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.now))
        self.history.append(
            {"time": stamp, "epoch": self.now, "node": node, "action": action, "detail": detail, **extra}
        )
        self.lines.append(f"repair: {node}: {action}: {detail}")

    def say_once(self, node: str, action: str, detail: str) -> None:
        """A waiting or deferred state: recorded when it changes, not at every pass."""
        if self.state["said"].get(node) != f"{action}: {detail}":
            self.state["said"][node] = f"{action}: {detail}"
            self.record(node, action, detail)

    # ---- one pass
    def tick(self) -> None:
        nodes = self.slurm.nodes()
        if nodes is None:
            self.lines.append("repair: sinfo did not answer; nothing done this pass")
            return
        self.follow_replacements(nodes)
        for name in list(self.state["isolated"]):
            n = nodes.get(name)
            if n is None or not n.drained or not n.reason.startswith(REPAIR_PREFIX):
                del self.state["isolated"][name]  # gone, or an operator took it over
        for node in sorted(nodes.values(), key=lambda n: n.name):
            self.consider(node)
        live = set(nodes)
        for name in [n for n in self.state["drains"] if n not in live]:
            del self.state["drains"][name]
        self.state["said"] = {n: s for n, s in self.state["said"].items() if n in live}

    def follow_replacements(self, nodes: dict[str, Node]) -> None:
        """New nodes succeed the oldest open replacement of their block; a successor in
        service ends its predecessor's time out; a replaced node is removed from Slurm
        once it no longer answers (its drain reason would keep it listed for ever)."""
        seen = self.state["seen"]
        first_pass = not seen
        for name, node in sorted(nodes.items()):
            if name in seen:
                continue
            seen[name] = {"block": node.block, "first": self.now}
            if first_pass:
                continue
            for r in self.state["replacements"]:
                if r["successor"] is None and r["block"] == node.block and r["node"] != name:
                    r["successor"] = name
                    self.record(name, "successor", f"replaces {r['node']} ({r['instance_id']}) in block {r['block']}")
                    break
        for r in self.state["replacements"]:
            succ = nodes.get(r["successor"] or "")
            if r.get("back") is None and succ is not None and succ.in_service and not succ.drained:
                r["back"] = self.now
                self.record(
                    succ.name,
                    "back",
                    f"in service ({succ.state}) {self.now - r['at']} s after {r['node']} was replaced",
                )
            old = nodes.get(r["node"])
            if not r.get("removed") and old is not None and not old.responding:
                err = self.slurm.delete(r["node"])
                if not err:
                    r["removed"] = self.now
                    self.record(r["node"], "removed", "deleted from Slurm (its instance is gone)")
            elif old is None and not r.get("removed"):
                r["removed"] = self.now
        for name in [n for n in seen if n not in nodes]:
            del seen[name]

    def consider(self, node: Node) -> None:
        if not node.drained:
            self.state["drains"].pop(node.name, None)
            return
        if node.name in self.state["isolated"]:
            return
        if any(r["node"] == node.name for r in self.state["replacements"]):
            return  # terminated already; it leaves Slurm once gone
        fault = classify(node.reason, load_json(os.path.join(self.settings.health_records, f"{node.name}.json"), None))
        if fault is None:
            self.state["drains"].pop(node.name, None)
            return
        drain = self.state["drains"].get(node.name)
        if drain is None or drain["reason"] != node.reason:
            drain = {"since": self.now, "reason": node.reason, "class": fault.cls, "source": fault.source}
            self.state["drains"][node.name] = drain
            self.record(node.name, "drained", f"{fault.source} ({fault.cls}): {node.reason}")
        if node.name == self.settings.self_node:
            self.say_once(node.name, "not-replaced", "this is the controller itself; replace it with `ops replace`")
            return
        repeat = self.repeat_of(node.name)
        if repeat is not None:
            self.isolate(
                node,
                f"failed again within {self.settings.repeat_window // 60} min of replacing {repeat['node']} ({repeat['fault']})",
            )
        elif self.settings.policy == "isolate":
            self.isolate(node, f"repair.policy isolate ({fault.source}, {fault.cls})")
        elif self.settings.policy in ("auto", "replace"):
            self.replace_when_ready(node, fault, drain)

    def repeat_of(self, name: str) -> dict[str, Any] | None:
        for r in self.state["replacements"]:
            if r["successor"] == name and self.now - r["at"] <= self.settings.repeat_window:
                return r
        return None

    def isolate(self, node: Node, why: str) -> None:
        reason = f"{REPAIR_PREFIX}isolated ({why}): {node.reason}"
        err = self.slurm.set_reason(node.name, reason)
        if err:
            self.say_once(node.name, "error", f"could not rename the drain to isolate it: {err}")
            return
        self.state["isolated"][node.name] = {"at": self.now, "why": why, "reason": node.reason}
        self.record(node.name, "isolated", f"{why}; kept out of service for an operator (`ops replace`)")

    def replace_when_ready(self, node: Node, fault: Fault, drain: dict[str, Any]) -> None:
        held = self.now - drain["since"]
        s = self.settings
        if s.policy == "auto" and fault.cls == "reset" and held < s.reset_grace:
            self.say_once(
                node.name,
                "waiting",
                f"reset-class fault: replaced if still drained {s.reset_grace // 60} min after the drain",
            )
            return
        jobs = self.slurm.jobs(node.name)
        if jobs and held < s.job_grace:
            self.say_once(
                node.name,
                "waiting",
                f"job(s) {','.join(jobs)} still running; requeued {s.job_grace // 60} min after the drain",
            )
            return
        if jobs:
            self.requeue(node, jobs)
            return
        why = self.blocked(node)
        if why:
            self.say_once(node.name, "deferred", why)
            return
        self.terminate(node, fault)

    def requeue(self, node: Node, jobs: list[str]) -> None:
        failed = {j: err for j in jobs if (err := self.slurm.requeue(j))}
        done = [j for j in jobs if j not in failed]
        if done:
            self.record(node.name, "requeued", f"job(s) {','.join(done)} sent back to the queue (scontrol requeue)")
        if failed:
            text = "; ".join(f"{j}: {e}" for j, e in sorted(failed.items()))
            self.say_once(node.name, "waiting", f"job(s) that cannot be requeued keep the node until they end: {text}")

    def blocked(self, node: Node) -> str:
        """Why a replacement may not start now (a limit or a block end), or ''."""
        s, reps = self.settings, self.state["replacements"]
        backoff = self.state.get("backoff", {}).get(node.name)
        if backoff and self.now < backoff["until"]:
            return f"AWS refused the last attempt ({backoff['why']}); next try after {backoff['until'] - self.now} s"
        end = block_end(s.fsx_root, node.block)
        if end is not None and self.now >= end - s.block_end_margin:
            return f"capacity block {node.block} is inside its end window (ends {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(end))}): no replacement"
        out = [r["node"] for r in reps if r.get("back") is None]
        if len(out) >= s.max_out:
            return f"{len(out)} node(s) out already ({','.join(out)}), the most repair.max_nodes_out allows"
        hour = [r for r in reps if self.now - r["at"] < 3600]
        if len(hour) >= s.max_per_hour:
            wait = 3600 - (self.now - min(r["at"] for r in hour))
            return f"{len(hour)} replacement(s) in the last hour, the most repair.max_replacements_per_hour allows; next in {wait} s"
        return ""

    def instance_id(self, node: str) -> str:
        marker = load_json(os.path.join(self.settings.fsx_root, "status", f"{node}.json"), {})
        iid = marker.get("instance_id", "") if isinstance(marker, dict) else ""
        return iid if re.fullmatch(r"i-[0-9a-f]{8,17}", iid) else ""

    def terminate(self, node: Node, fault: Fault) -> None:
        iid = self.instance_id(node.name)
        if not iid:
            self.say_once(
                node.name,
                "error",
                f"no instance id in {self.settings.fsx_root}/status/{node.name}.json; replace it with `ops replace`",
            )
            return
        try:
            activity = terminate_instance(self.asg_client(), iid)
        except Exception as err:  # AwsCallError, or no region/credentials: recorded, never raised
            self.aws_refused(node, err)
            return
        self.state.get("backoff", {}).pop(node.name, None)
        group = activity.get("AutoScalingGroupName", "?")
        self.state["replacements"].append(
            {
                "node": node.name,
                "instance_id": iid,
                "block": node.block,
                "fault": fault.evidence,
                "class": fault.cls,
                "at": self.now,
                "group": group,
                "successor": None,
                "back": None,
            }
        )
        self.record(
            node.name,
            "replaced",
            f"terminated {iid} in {group} without decrementing its capacity ({fault.source}, {fault.cls}): the group launches a new instance",
            instance_id=iid,
            group=group,
        )
        note = f"{REPAIR_PREFIX}replaced {iid}: {node.reason}"
        if self.slurm.set_reason(node.name, note):
            self.lines.append(f"repair: {node.name}: could not note the replacement in its drain reason")

    def aws_refused(self, node: Node, err: Exception) -> None:
        denied, throttled = getattr(err, "denied", False), getattr(err, "throttled", False)
        if throttled:
            self.record(node.name, "throttled", f"{err}; retried at the next pass")
            return
        until = self.now + DENIED_BACKOFF
        self.state.setdefault("backoff", {})[node.name] = {
            "until": until,
            "why": "access denied" if denied else str(err)[:200],
        }
        self.record(node.name, "error", f"{err}; next try in {DENIED_BACKOFF} s", denied=bool(denied))

    def asg_client(self) -> Any:
        if self.asg is None:
            self.asg = _aws_client().client("autoscaling")
        return self.asg


def _aws_client() -> Any:
    """The shared AWS client module: beside this file on the node, a package in the repo."""
    try:
        import aws_client  # type: ignore[import-not-found]
    except ImportError:
        from nodeside import aws_client
    return aws_client


def terminate_instance(asg: Any, instance_id: str) -> dict[str, Any]:
    """Terminate through the group, which then launches a replacement [ASG-TERMINATE]."""
    out = _aws_client().call(
        asg, "TerminateInstanceInAutoScalingGroup", InstanceId=instance_id, ShouldDecrementDesiredCapacity=False
    )
    return out.get("Activity", {})


# --- files ------------------------------------------------------------------------------------------


def load_state(settings: Settings) -> dict[str, Any]:
    state = load_json(os.path.join(settings.repair_dir, "state.json"), None)
    if not isinstance(state, dict):
        return _fresh_state()
    return {**_fresh_state(), **state}


def save(agent: Agent) -> None:
    d = agent.settings.repair_dir
    write_json(os.path.join(d, "state.json"), agent.state)
    if agent.history:
        with open(os.path.join(d, "history.jsonl"), "a") as f:
            for h in agent.history:
                f.write(json.dumps(h, sort_keys=True) + "\n")


def read_history(repair_dir: str, limit: int = 200) -> list[dict[str, Any]]:
    try:
        with open(os.path.join(repair_dir, "history.jsonl")) as f:
            lines = f.readlines()[-limit:]
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def summary(repair_dir: str, policy: str) -> dict[str, Any]:
    """What `ops status` and `gpu-cluster-validation status` show: the policy, nodes out,
    isolated nodes, drains being handled, and the recent history."""
    state = load_json(os.path.join(repair_dir, "state.json"), {}) or {}
    reps = state.get("replacements", [])
    return {
        "policy": policy,
        "out": [r["node"] for r in reps if r.get("back") is None],
        "isolated": state.get("isolated", {}),
        "drains": state.get("drains", {}),
        "waiting": state.get("said", {}),
        "replacements": reps[-50:],
        "history": read_history(repair_dir, 100),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu-cluster-repair", description="the controller's repair agent")
    p.add_argument("command", choices=("tick", "status"))
    p.add_argument("--now", type=int, help="the time (epoch seconds); default the clock")
    a = p.parse_args(argv)
    settings = Settings.from_env(dict(os.environ))
    if a.command == "status":
        print(json.dumps(summary(settings.repair_dir, settings.policy), indent=1, sort_keys=True))
        return 0
    if settings.policy not in ("auto", "replace", "isolate"):
        return 0
    agent = Agent(settings, Slurm(), a.now if a.now is not None else int(time.time()), state=load_state(settings))
    agent.tick()
    try:
        save(agent)
    except OSError as e:
        agent.lines.append(f"repair: cannot write the record under {settings.repair_dir}: {e}")
    for line in agent.lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
