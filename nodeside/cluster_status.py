"""What `gpu-cluster-ops status` runs on the controller (through SSM): one JSON document.

    python3 cluster_status.py FSX_ROOT

Prints BEGIN, then one line of JSON: the per-node boot markers
(FSX_ROOT/status/<node>.json), the health program's last record per node
(FSX_ROOT/health/<node>.json, summarised: state, time, reason, failed checks), the
first-boot gate report (`gpu-cluster-validation status --json`: exit 0 GO, 1 NO-GO,
3 no run yet), the Slurm state and drain reason of every node, each node's EC2 network
nodes as the controller's last topology refresh recorded them (FSX_ROOT/topology/nodes.json:
the list top layer first, or why the node is flat), and the repair agent's
record (FSX_ROOT/repair: its policy, nodes out, isolated or waiting, the recent history).
ops/remote.py sends this file's text as a here-document, so it stays stdlib only and
never fails: a tool or file that is missing shows in the document instead.
"""

import glob
import json
import os
import subprocess
import sys

BEGIN = "GPU-CLUSTER-STATUS-JSON"


def run(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout, r.stderr
    except Exception as e:  # a missing tool or a hang is reported, not raised
        return -1, "", str(e)


def markers(root):
    out = {}
    for path in sorted(glob.glob(root + "/status/*.json")):
        try:
            with open(path) as f:
                m = json.load(f)
        except Exception as e:
            m = {"state": "unreadable", "reason": str(e)}
        out[os.path.basename(path)[:-5]] = m
    return out


def health(root):
    """The health program's last run per node, without the per-check detail of passing checks."""
    out = {}
    for path in sorted(glob.glob(root + "/health/*.json")):
        try:
            with open(path) as f:
                r = json.load(f)
            out[os.path.basename(path)[:-5]] = {
                "state": r.get("state"),
                "time": r.get("time"),
                "reason": r.get("reason", ""),
                "failed": [c.get("detail") for c in r.get("checks", []) if c.get("status") == "fail"],
                "skipped": sorted(c.get("check") for c in r.get("checks", []) if c.get("status") == "skip"),
                "slurm_action": (r.get("slurm") or {}).get("action"),
            }
        except Exception as e:
            out[os.path.basename(path)[:-5]] = {"state": "unreadable", "reason": str(e)}
    return out


REPAIR_HISTORY = 100  # most recent actions shipped back; the file keeps them all


def repair(root, env_file="/etc/gpu-cluster/cluster.env"):
    """The repair agent's state and recent history (nodeside/repair.py writes them)."""
    policy = "unknown"
    try:
        with open(env_file) as f:
            for line in f:
                if line.startswith("REPAIR_POLICY="):
                    policy = line.split("=", 1)[1].strip().strip("'")
    except OSError:
        pass
    out = {"policy": policy, "out": [], "isolated": {}, "waiting": {}, "history": []}
    try:
        with open(root + "/repair/state.json") as f:
            state = json.load(f)
        out["out"] = [r.get("node") for r in state.get("replacements", []) if r.get("back") is None]
        out["isolated"] = {n: i.get("why", "") for n, i in state.get("isolated", {}).items()}
        out["waiting"] = state.get("said", {})
    except Exception as e:  # no agent yet (policy none, first pass) or unreadable: shown as such
        out["state_error"] = str(e)
    try:
        with open(root + "/repair/history.jsonl") as f:
            lines = f.readlines()[-REPAIR_HISTORY:]
        for line in lines:
            try:
                out["history"].append(json.loads(line))
            except ValueError:
                continue
    except OSError:
        pass
    return out


def validation():
    rc, out, err = run(["gpu-cluster-validation", "status", "--json"])
    try:
        return json.loads(out)
    except ValueError:
        # 3: no run to read; 2 on nodes booted before the exit-code table (docs/cli.md)
        return {"verdict": "NO-RUN" if rc in (2, 3) else "UNKNOWN", "reasons": [(out or err).strip()]}


def slurm():
    """({node: state}, {node: drain reason}) from sinfo (one line per node and partition)."""
    rc, out, err = run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"])
    states, reasons = {}, {}
    for line in out.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3 and parts[0]:
            states[parts[0]] = parts[1]
            if parts[2] and parts[2] != "none":
                reasons[parts[0]] = parts[2]
    return states, reasons


def topology(root):
    """{node: {"network_nodes": [...] or None, "flat_reason": ...}} from the last refresh."""
    try:
        with open(root + "/topology/nodes.json") as f:
            nodes = json.load(f).get("nodes") or {}
    except Exception:  # no refresh yet, or topology none
        return {}
    return {
        node: {"network_nodes": info.get("network_nodes"), "flat_reason": info.get("flat_reason")}
        for node, info in nodes.items()
        if isinstance(info, dict)
    }


def main(root):
    print(BEGIN)
    states, reasons = slurm()
    doc = {
        "markers": markers(root),
        "health": health(root),
        "validation": validation(),
        "slurm": states,
        "reasons": reasons,
        "topology": topology(root),
        "repair": repair(root),
    }
    print(json.dumps(doc, sort_keys=True))


# The exit-code table of every gpu-cluster CLI: a copy of clitools/exits.py (this file is
# sent to `python3 -` over SSM and cannot import anything of ours); tests/repo/test_exit_codes.py
# keeps it equal.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130

if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].startswith("/"):
        print("usage: cluster_status.py FSX_ROOT (an absolute path)", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    main(sys.argv[1])
    sys.exit(EXIT_OK)
