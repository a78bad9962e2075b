"""A stateful stand-in for the Slurm commands the controller's agent loop runs (sinfo,
scontrol, squeue, sbatch, scancel), over one JSON file, for the join gate and the reaper.

It keeps what those scripts read and what slurmctld enforces on them, as measured on
22.05 against a real slurmctld (tests/daemons/test_join_gate_slurm.py):
- a node has a base state (IDLE, ALLOCATED, DOWN) and flags (DRAIN, NOT_RESPONDING;
  RESERVED while a reservation holds it); sinfo's %T prints it as slurm_protocol_defs.c
  node_state_string does: any DRAIN shows as drained/draining (DOWN+DRAIN+NOT_RESPONDING
  is "drained*"), NOT_RESPONDING adds "*"; `-t down` selects the base state;
- `scontrol delete nodename` refuses a node that is reserved or allocated ("Requested
  nodes are busy"); `scontrol -o show node` lists "No nodes in the system" when empty;
- a node that goes down takes its job with it (ended, or requeued to PENDING with
  `requeue`), as slurmctld does at SlurmdTimeout.
Real daemons stay the proof (tests/daemons); this gives the unit tests a fake clock and
no daemon. `FAKE_SLURM_DOWN=1` makes every command fail as with slurmctld unreachable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""#!/usr/bin/env python3
import json, os, sys
STATE = os.environ["FAKE_SLURM_STATE"]
cmd, args = os.path.basename(sys.argv[0]), sys.argv[1:]
if os.environ.get("FAKE_SLURM_DOWN") == "1":
    print(f"{cmd}: error: Unable to contact slurm controller (connect failure)", file=sys.stderr)
    sys.exit(1)
with open(STATE) as f:
    st = json.load(f)
with open(st["log"], "a") as f:
    f.write(json.dumps([cmd, *args]) + "\n")

def kv(items):
    return dict(a.split("=", 1) for a in items if "=" in a)

def opt(name, default=None):
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default

def reserved(name):
    return any(name in r["nodes"] for r in st["resv"].values())

def state_string(n):
    star = "*" if n["no_resp"] else ""
    if n["drain"]:
        return ("draining" if n["base"] == "ALLOCATED" else "drained") + star
    return n["base"].lower() + star

def full_state(n):
    parts = [n["base"]] + (["DRAIN"] if n["drain"] else []) + ["DYNAMIC_NORM"]
    parts += (["RESERVED"] if reserved(n["name"]) else []) + (["NOT_RESPONDING"] if n["no_resp"] else [])
    return "+".join(parts)

def save():
    with open(STATE, "w") as f:
        json.dump(st, f)

nodes = st["nodes"]
if cmd == "sinfo":
    fmt, want = opt("-o"), opt("-t")
    part = opt("-p")
    for n in nodes.values():
        if want and n["base"] != want.upper():
            continue
        if part and part not in n["partitions"]:
            continue
        f = {"%N": n["name"], "%T": state_string(n), "%E": n["reason"] or "none", "%H": n["reason_time"] or "Unknown"}
        line = fmt
        for k, v in f.items():
            line = line.replace(k, v)
        print(line)
elif cmd == "scontrol" and args[:3] == ["-o", "show", "node"]:
    if not nodes:
        print("No nodes in the system")
    for n in nodes.values():
        reason = f" Reason={n['reason']} [root@{n['reason_time']}]" if n["reason"] else ""
        print(f"NodeName={n['name']} Arch=x86_64 NodeAddr=10.0.0.1 State={full_state(n)} Partitions=train{reason}")
elif cmd == "scontrol" and args[0] == "update":
    a = kv(args[1:])
    n = nodes.get(a["nodename"])
    if n is None:
        print(f"Invalid node name specified", file=sys.stderr); sys.exit(1)
    if a["state"] == "drain":
        n["drain"], n["reason"], n["reason_time"] = True, a["reason"], st["now"]
    elif a["state"] == "resume":
        n["drain"], n["reason"], n["reason_time"] = False, "", ""
        if n["base"] == "DOWN":
            n["base"] = "IDLE"
    save()
elif cmd == "scontrol" and args[:2] == ["create", "reservation"]:
    a = kv(args[2:])
    if st.get("refuse_reservations"):
        print("Error creating the reservation: Requested nodes are busy", file=sys.stderr); sys.exit(1)
    st["resv"][a["reservationname"]] = {"nodes": a["nodes"].split(","), "flags": a.get("flags", "")}
    save()
elif cmd == "scontrol" and args[0] == "delete":
    a = kv(args[1:])
    if "reservationname" in a:
        if st["resv"].pop(a["reservationname"], None) is None:
            print("Reservation not found", file=sys.stderr); sys.exit(1)
    else:
        name = a["nodename"]
        if name not in nodes:
            print(f"delete_node nodename={name}: Invalid node name specified", file=sys.stderr); sys.exit(1)
        if reserved(name) or nodes[name]["base"] == "ALLOCATED":
            print(f"delete_node nodename={name}: Requested nodes are busy", file=sys.stderr); sys.exit(1)
        del nodes[name]
    save()
elif cmd == "sbatch":
    job = str(st["next_job"]); st["next_job"] += 1
    hosts = opt("-w", "").split(",")
    st["jobs"][job] = {"state": "RUNNING", "nodes": hosts, "argv": args,
                       "newcomers": os.environ.get("VALIDATION_NEWCOMERS", ""),
                       "partner": os.environ.get("VALIDATION_PARTNER", "")}
    for h in hosts:
        if h in nodes and nodes[h]["base"] == "IDLE":
            nodes[h]["base"] = "ALLOCATED"
    save()
    print(job)
elif cmd == "squeue":
    job = st["jobs"].get(opt("-j"))
    if job is None:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr); sys.exit(1)
    if job["state"] in ("PENDING", "RUNNING", "COMPLETING"):
        print(job["state"])
elif cmd == "scancel":
    for j in args:
        if j in st["jobs"] and st["jobs"][j]["state"] in ("PENDING", "RUNNING"):
            st["jobs"][j]["state"] = "CANCELLED"
            for h in st["jobs"][j]["nodes"]:
                if h in nodes and nodes[h]["base"] == "ALLOCATED":
                    nodes[h]["base"] = "IDLE"
    save()
else:
    print(f"fake slurm: unexpected {cmd} {args}", file=sys.stderr)
    sys.exit(2)
"""

COMMANDS = ("sinfo", "scontrol", "squeue", "sbatch", "scancel")


class FakeSlurmctld:
    """The state file and the commands; tests change the world through these methods."""

    def __init__(self, root: Path):
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        for name in COMMANDS:
            p = self.bin / name
            p.write_text(SCRIPT.replace("#!/usr/bin/env python3", f"#!{sys.executable} -S", 1))  # no site: fast start
            p.chmod(0o755)
        self.state_file = root / "slurm-state.json"
        self.log = root / "slurm-calls.log"
        self._save(
            {"nodes": {}, "resv": {}, "jobs": {}, "next_job": 101, "now": "2026-01-05T10:00:00", "log": str(self.log)}
        )

    @property
    def env(self) -> dict[str, str]:
        return {"FAKE_SLURM_STATE": str(self.state_file)}

    def _load(self) -> dict:
        return json.loads(self.state_file.read_text())

    def _save(self, st: dict) -> None:
        self.state_file.write_text(json.dumps(st))

    def state(self) -> dict:
        return self._load()

    def register(self, name: str, *, drain: bool = False, base: str = "IDLE") -> None:
        """A dynamic node registers (`slurmd -Z`, with State=DRAIN when it joins a running
        cluster: drained, no reason)."""
        st = self._load()
        st["nodes"][name] = {
            "name": name,
            "base": base,
            "drain": drain,
            "no_resp": False,
            "reason": "",
            "reason_time": "",
            "partitions": ["train"],
        }
        self._save(st)

    def stop_answering(self, name: str, *, requeue: bool = False) -> None:
        """What slurmctld does SlurmdTimeout after a node's slurmd fell silent (terminated,
        stopped, crashed): DOWN + NOT_RESPONDING, reason "Not responding"; its jobs end, or
        go back to PENDING when they may be requeued."""
        st = self._load()
        n = st["nodes"][name]
        n.update(base="DOWN", no_resp=True)
        if not n["reason"]:
            n.update(reason="Not responding", reason_time=st["now"])
        for job in st["jobs"].values():
            if name in job["nodes"] and job["state"] == "RUNNING":
                job["state"] = "PENDING" if requeue else "NODE_FAIL"
                for h in job["nodes"]:
                    if h in st["nodes"] and st["nodes"][h]["base"] == "ALLOCATED":
                        st["nodes"][h]["base"] = "IDLE"
        self._save(st)

    def miss_a_ping(self, name: str) -> None:
        """NOT_RESPONDING on a live base state: one ping missed, before SlurmdTimeout."""
        st = self._load()
        st["nodes"][name]["no_resp"] = True
        self._save(st)

    def answer_again(self, name: str) -> None:
        """The node's slurmd registers again; ReturnToService=2 returns a DOWN node to IDLE
        and keeps its DRAIN flag and reason (node_mgr.c validate_node_specs)."""
        st = self._load()
        n = st["nodes"][name]
        n["no_resp"] = False
        if n["base"] == "DOWN":
            n["base"] = "IDLE"
            if n["reason"] == "Not responding":
                n.update(reason="", reason_time="")
        self._save(st)

    def delete(self, name: str) -> None:
        st = self._load()
        del st["nodes"][name]
        self._save(st)

    def end_job(self, job: str, state: str = "COMPLETED") -> None:
        st = self._load()
        st["jobs"][job]["state"] = state
        for h in st["jobs"][job]["nodes"]:
            if h in st["nodes"] and st["nodes"][h]["base"] == "ALLOCATED":
                st["nodes"][h]["base"] = "IDLE"
        self._save(st)

    def sinfo(self) -> dict[str, tuple[str, str]]:
        """node -> (%T, %E), read through the fake sinfo itself."""
        r = subprocess.run(
            [str(self.bin / "sinfo"), "-h", "-N", "-o", "%N|%T|%E"],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            check=True,
        )
        return {n: (t, e) for n, t, e in (ln.split("|", 2) for ln in r.stdout.splitlines())}

    def calls(self, command: str) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [c[1:] for c in map(json.loads, self.log.read_text().splitlines()) if c[0] == command]
