"""What `gpu-cluster-ops status` runs on the controller (through SSM): one JSON document.

    python3 cluster_status.py FSX_ROOT

Prints BEGIN, then one line of JSON: the per-node boot markers
(FSX_ROOT/status/<node>.json), the health program's last record per node
(FSX_ROOT/health/<node>.json, summarised: state, time, reason, failed checks), the
first-boot gate report (`gpu-cluster-validation status --json`: exit 0 GO, 1 NO-GO,
2 no run yet) and the Slurm state and drain reason of every node.
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


def validation():
    rc, out, err = run(["gpu-cluster-validation", "status", "--json"])
    try:
        return json.loads(out)
    except ValueError:
        return {"verdict": "NO-RUN" if rc == 2 else "UNKNOWN", "reasons": [(out or err).strip()]}


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


def main(root):
    print(BEGIN)
    states, reasons = slurm()
    doc = {
        "markers": markers(root),
        "health": health(root),
        "validation": validation(),
        "slurm": states,
        "reasons": reasons,
    }
    print(json.dumps(doc, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
