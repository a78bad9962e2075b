"""The shell lines `status` and `replace` run on the controller through SSM.

Cluster and node names are validated by the config schema and by `node_ipv4`
(lowercase letters, digits, '-'), so embedding them in the script is safe.
"""

from __future__ import annotations

STATUS_BEGIN = "GPU-CLUSTER-STATUS-JSON"

# One JSON document: per-node boot markers (/fsx/.gpu-cluster/<cluster>/status/<node>.json),
# the first-boot gate report (`gpu-cluster-validation status --json`: exit 0 GO, 1 NO-GO,
# 2 no run yet) and the Slurm state of every node.
_STATUS_PY = """\
import glob, json, os, subprocess
root = "/fsx/.gpu-cluster/{cluster}"
def run(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout, r.stderr
    except Exception as e:
        return -1, "", str(e)
markers = {{}}
for p in sorted(glob.glob(root + "/status/*.json")):
    try:
        with open(p) as f:
            m = json.load(f)
    except Exception as e:
        m = {{"state": "unreadable", "reason": str(e)}}
    markers[os.path.basename(p)[:-5]] = m
rc, out, err = run(["gpu-cluster-validation", "status", "--json"])
try:
    validation = json.loads(out)
except ValueError:
    validation = {{"verdict": "NO-RUN" if rc == 2 else "UNKNOWN", "reasons": [(out or err).strip()]}}
rc, out, err = run(["sinfo", "-h", "-N", "-o", "%N %T"])
slurm = dict(line.split(None, 1) for line in out.splitlines() if len(line.split(None, 1)) == 2)
print("{begin}")
print(json.dumps({{"markers": markers, "validation": validation, "slurm": slurm}}, sort_keys=True))
"""


def status_script(cluster: str) -> list[str]:
    body = _STATUS_PY.format(cluster=cluster, begin=STATUS_BEGIN)
    return ["python3 - <<'GPU_CLUSTER_PY'", *body.splitlines(), "GPU_CLUSTER_PY"]


def drain_script(node: str, reason: str) -> list[str]:
    return [f'scontrol update nodename={node} state=drain reason="{reason}"']


def node_state_script(node: str) -> list[str]:
    # %T: the node's full state (idle, allocated, drained, down ...); empty when unknown.
    return [f"sinfo -h -N -n {node} -o '%T' 2>/dev/null | head -n 1"]
