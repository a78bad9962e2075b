"""What `gpu-cluster-ops status` runs on the controller (through SSM): one JSON document.

    python3 cluster_status.py FSX_ROOT

Prints BEGIN, then one line of JSON: the per-node boot markers
(FSX_ROOT/status/<node>.json), the first-boot gate report (`gpu-cluster-validation
status --json`: exit 0 GO, 1 NO-GO, 2 no run yet) and the Slurm state of every node.
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


def validation():
    rc, out, err = run(["gpu-cluster-validation", "status", "--json"])
    try:
        return json.loads(out)
    except ValueError:
        return {"verdict": "NO-RUN" if rc == 2 else "UNKNOWN", "reasons": [(out or err).strip()]}


def slurm():
    rc, out, err = run(["sinfo", "-h", "-N", "-o", "%N %T"])
    return dict(line.split(None, 1) for line in out.splitlines() if len(line.split(None, 1)) == 2)


def main(root):
    print(BEGIN)
    print(json.dumps({"markers": markers(root), "validation": validation(), "slurm": slurm()}, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
