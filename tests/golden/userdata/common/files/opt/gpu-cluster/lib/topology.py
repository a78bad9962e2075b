"""EC2 network topology for Slurm: what the controller's agent loop runs to keep
/etc/slurm/topology.conf current (lib/topology.sh topology_tick).

    topology.py refresh [--force]   read the topology, write topology.conf, reconfigure
    topology.py show                print what the last refresh recorded (nodes.json)

Runs on the controller with the node venv's interpreter (boto3) and the controller's
own role, which may call exactly `ec2:DescribeInstanceTopology` (infra/iam.py).

Which instances: the cluster's Slurm nodes (`sinfo`), each mapped to its instance id
by the boot marker it wrote on /fsx (FSX_ROOT/status/<node>.json, from instance
metadata). No ec2:DescribeInstances is needed, and nothing outside the cluster is read.

The API [TOPO-API]: `InstanceIds` takes at most 100 ids and cannot be combined with
`MaxResults`, so ids go in batches of 100 and every batch follows `NextToken`. Each
instance carries `NetworkNodes`, top layer first and the node the instance hangs off
last (3 layers for p4d/p5/p5e/p5en, 4 for p6-b200 [TOPO]); the list is empty for
types without topology and for instances not yet `running`, and right after a launch
the answer may lag (eventual consistency). Such nodes fall back to the flat layout
(the `gpu-cluster-flat` leaf) until a later refresh covers them; the log says so.

topology.conf (`tree`, [SLURM-TOPO]): one switch per network node (leaves hold the
nodes, upper layers their child switches) under one synthetic root `gpu-cluster-root`
whenever the nodes do not already share a top-layer node, because topology/tree only
spans jobs across nodes that one switch reaches ("Jobs can only span nodes connected
by the same switch fabric"). With no node covered the file holds no switch at all:
Slurm then schedules as if no topology plugin were loaded.

`block` renders one BlockName per UltraServer domain (CapacityBlockId) or leaf; it is
not used for the catalog's types (docs/topology.md says why).

Applying: the new file is written atomically, published on /fsx for the workers, and
`scontrol reconfigure` makes slurmctld and every slurmd re-read it; running jobs keep
their nodes and pending jobs are placed by the new topology. A file that did not change
since slurmctld last read it is not applied again. Slurm before 23.02.2 gets a file
without a switch and no reconfigure: there is nothing to apply, and 22.05's reconfigure
leaves a dynamic node that runs a job across it ALLOCATED after the job ends. When EC2
cannot be read (throttled past the retries, denied, unreachable), nodes keep their last
recorded network nodes and new nodes go flat, so a node that joined is still in
topology.conf. Exit status: 0 applied or unchanged, 2 usage, 3 EC2 or Slurm could not be
read or reconfigure failed (said on stderr), 4 internal error.
"""

import argparse
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import time

ROOT_SWITCH = "gpu-cluster-root"
FLAT_SWITCH = "gpu-cluster-flat"
BATCH = 100  # InstanceIds: "Maximum 100 explicitly specified instance IDs" [TOPO-API]
# Slurm reads switch lists with its hostlist parser: a trailing run of digits is a
# number (strtoul), so a very long one would come back changed; 24.11 also caps a
# switch name at 64 characters. Names outside this shape are replaced by a digest.
_SAFE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,62}$")
_TRAILING_DIGITS = re.compile(r"[0-9]+$")


# Slurm before 23.02.2 leaves dynamic nodes out of the switch tree ("Fix dynamic nodes
# not being sorted and not being included in topology" and "Fix building switch topology
# after a reconfig with the correct nodes", 23.02.2 NEWS): every node of ours is dynamic,
# and Slurm refuses a job that needs a node under no switch (measured on 22.05: still
# refused after the reconfigure that lists it). There the file keeps no switch.
DYNAMIC_TOPOLOGY_SINCE = (23, 2, 2)
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


class TopologyError(Exception):
    """A step that could not be done (AWS, Slurm, a file); the previous topology stays."""


def switch_name(network_node):
    """The Slurm name of a network node: the node id itself when Slurm keeps it intact."""
    digits = _TRAILING_DIGITS.search(network_node)
    if _SAFE_NAME.match(network_node) and (digits is None or len(digits.group()) <= 18):
        return network_node
    return "nn-h" + hashlib.sha256(network_node.encode()).hexdigest()[:16] + "x"


# --- which instances ------------------------------------------------------------------


def instance_ids(status_dir, nodes):
    """{node: instance id} from the boot markers of the given Slurm nodes."""
    out = {}
    for path in sorted(glob.glob(os.path.join(status_dir, "*.json"))):
        try:
            with open(path, encoding="utf-8") as f:
                marker = json.load(f)
        except (OSError, ValueError):
            continue
        node = marker.get("node") or os.path.basename(path)[: -len(".json")]
        iid = marker.get("instance_id") or ""
        if node in nodes and iid.startswith("i-"):
            out[node] = iid
    return out


def describe(fetch_pages, ids):
    """{instance id: InstanceTopology dict} for the ids, in batches of BATCH ids.

    `fetch_pages(**params)` yields the `Instances` of each page (aws_client.pages)."""
    out = {}
    ids = sorted(set(ids))
    for start in range(0, len(ids), BATCH):
        for item in fetch_pages(InstanceIds=ids[start : start + BATCH]):
            if item.get("InstanceId") in ids:
                out[item["InstanceId"]] = item
    return out


# --- placement and rendering ----------------------------------------------------------


def placement(node_ids, answers):
    """{node: [network node, ...] top first} for covered nodes; {node: reason} for the rest.

    A path that contradicts an earlier one (a network node under two parents, or a leaf
    that is another path's inner node) would make topology.conf not a tree, which
    slurmctld refuses; that node falls back to flat instead."""
    placed, flat, parent, depth = {}, {}, {}, {}
    for node in sorted(node_ids):
        item = answers.get(node_ids[node])
        path = [switch_name(n) for n in (item or {}).get("NetworkNodes") or []]
        if item is None:
            flat[node] = "not in DescribeInstanceTopology's answer"
        elif not path:
            flat[node] = f"no network nodes for {item.get('InstanceType') or 'this type'} (yet)"
        elif _conflicts(path, parent, depth):
            flat[node] = f"its network nodes {'/'.join(path)} contradict another node's"
        else:
            for i, nn in enumerate(path):
                parent[nn] = path[i - 1] if i else None
                depth[nn] = i
            placed[node] = path
    return placed, flat


def _conflicts(path, parent, depth):
    for i, nn in enumerate(path):
        if nn in parent and (parent[nn] != (path[i - 1] if i else None) or depth[nn] != i):
            return True
    return False


def render_tree(placed, flat, header=""):
    """topology.conf for topology/tree: leaves first, then each layer up, then the root."""
    leaves, children = {}, {}
    for node, path in placed.items():
        leaves.setdefault(path[-1], []).append(node)
        for i in range(1, len(path)):
            children.setdefault(path[i - 1], set()).add(path[i])
    tops = sorted({path[0] for path in placed.values()})
    lines = [header] if header else []
    for leaf in sorted(leaves):
        lines.append(f"SwitchName={leaf} Nodes={','.join(sorted(leaves[leaf]))}")
    for nn in sorted(children, key=lambda n: (-_height(n, children), n)):
        lines.append(f"SwitchName={nn} Switches={','.join(sorted(children[nn]))}")
    if placed and flat:
        lines.append(f"SwitchName={FLAT_SWITCH} Nodes={','.join(sorted(flat))}")
    if placed and (len(tops) > 1 or flat):
        lines.append(f"SwitchName={ROOT_SWITCH} Switches={','.join(tops + ([FLAT_SWITCH] if flat else []))}")
    return "\n".join(lines) + "\n"


def _height(nn, children):
    """Layers below a switch (leaves 0): parents are written after their children."""
    kids = children.get(nn)
    return 0 if not kids else 1 + max(_height(k, children) for k in kids)


def render_block(placed, flat, answers_by_node, header=""):
    """topology.conf for topology/block: one block per UltraServer domain
    (CapacityBlockId) or, without one, per leaf network node; uncovered nodes form
    their own block. No BlockSizes/BlockLevels line: 23.11 knows only BlockLevels and
    24.11 only BlockSizes, and both default to the smallest block."""
    blocks = {}
    for node, path in placed.items():
        domain = (answers_by_node.get(node) or {}).get("CapacityBlockId")
        blocks.setdefault(switch_name(domain) if domain else path[-1], []).append(node)
    if placed and flat:
        blocks[FLAT_SWITCH] = sorted(flat)
    lines = [header] if header else []
    lines += [f"BlockName={b} Nodes={','.join(sorted(n))}" for b, n in sorted(blocks.items())]
    return "\n".join(lines) + "\n"


def render(plugin, placed, flat, answers_by_node):
    """topology.conf text for `tree` or `block`."""
    header = (
        "# Generated by gpu-cluster (lib/topology.py) from EC2 DescribeInstanceTopology; do not edit.\n"
        f"# {len(placed)} node(s) placed by their network nodes, {len(flat)} flat (not covered yet)."
    )
    if plugin == "block":
        return render_block(placed, flat, answers_by_node, header)
    return render_tree(placed, flat, header)


# --- the refresh ----------------------------------------------------------------------


def slurm_version(run=subprocess.run):
    """(major, minor, micro) of the Slurm clients here (`scontrol --version`), None if unknown."""
    r = run(["scontrol", "--version"], capture_output=True, text=True, check=False, timeout=30)
    m = _VERSION.search(r.stdout or "")
    return tuple(int(x) for x in m.groups()) if m else None


def too_old(version):
    return version is not None and version < DYNAMIC_TOPOLOGY_SINCE


# lib/boot-failures.sh's reason for the placeholder of a node whose boot failed (listed
# down, never registered); tests/nodeside/test_topology.py keeps the two equal.
BOOT_FAILED_PREFIX = "boot failed at"


def slurm_nodes(run=subprocess.run):
    """Every node slurmctld knows (any state), sorted, but the placeholders of failed boots:
    no instance behind them to place, and a topology.conf naming them changes at every
    listing (the reconfigure drops a node that never registered; the reaper lists it again)."""
    r = run(["sinfo", "-h", "-N", "-o", "%N|%E"], capture_output=True, text=True, check=False, timeout=60)
    if r.returncode != 0:
        raise TopologyError(f"sinfo failed: {(r.stderr or r.stdout).strip()[:200]}")
    nodes = set()
    for line in r.stdout.splitlines():
        name, _, reason = line.strip().partition("|")
        if name and not reason.startswith(BOOT_FAILED_PREFIX):
            nodes.add(name)
    return sorted(nodes)


def write_atomic(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def record(placed, flat, node_ids, answers, plugin, now):
    """nodes.json: what `ops status` and the validation gate read (network nodes per node)."""
    nodes = {}
    for node, iid in sorted(node_ids.items()):
        item = answers.get(iid) or {}
        nodes[node] = {
            "instance_id": iid,
            "instance_type": item.get("InstanceType"),
            "network_nodes": placed.get(node),
            "capacity_block_id": item.get("CapacityBlockId"),
            "flat_reason": flat.get(node),
        }
    for node, why in flat.items():
        nodes.setdefault(node, {"instance_id": None, "network_nodes": None, "flat_reason": why})
    return {"updated": now, "plugin": plugin, "nodes": nodes}


def previous_answers(record, node_ids):
    """The last refresh's network nodes (nodes.json) as API-shaped answers, for the nodes
    that are still the same instances: what stands in when EC2 cannot be read."""
    out = {}
    for node, info in ((record or {}).get("nodes") or {}).items():
        iid = (info or {}).get("instance_id")
        if iid and node_ids.get(node) == iid:
            out[iid] = {
                "InstanceId": iid,
                "InstanceType": info.get("instance_type"),
                "NetworkNodes": info.get("network_nodes") or [],
            }
    return out


def _answers(args, fetch_pages, node_ids):
    """(answers, failure): EC2's, or on a failed call the last known ones and why."""
    try:
        return (describe(fetch_pages, node_ids.values()) if node_ids else {}), None
    except TopologyError as e:
        record = json.loads(_read(os.path.join(args.fsx_root, "topology", "nodes.json")) or "null")
        return previous_answers(record, node_ids), f"{e}; nodes keep their last known network nodes, new ones are flat"


def refresh(args, fetch_pages, run=subprocess.run, now=None):
    """One refresh: (log lines, failure or None).

    When EC2 cannot be read, nodes keep the network nodes the last refresh recorded and
    new ones go flat: a node Slurm created since then is in no switch, and Slurm refuses a
    job that names it ("Requested node configuration is not available", measured on
    22.05 and 24.11), which the join gate's job does. Raises TopologyError when Slurm
    cannot be read."""
    nodes = slurm_nodes(run)
    node_ids = instance_ids(os.path.join(args.fsx_root, "status"), set(nodes))
    answers, failure = _answers(args, fetch_pages, node_ids)
    placed, flat = placement(node_ids, answers)
    if failure:
        flat.update({n: "EC2 could not be read" for n in flat if node_ids.get(n) not in answers})
    flat.update({n: "no boot marker with its instance id on /fsx" for n in nodes if n not in node_ids})
    text = render(args.plugin, placed, flat, {n: answers.get(i) for n, i in node_ids.items()})
    lines = [f"topology: {node} stays in the flat layout for now: {why}" for node, why in sorted(flat.items())]
    version = slurm_version(run)
    seen = f"{version[0]}.{version[1]:02d}.{version[2]}" if too_old(version) else ""
    if seen:
        text = text.split("\n", 2)[0] + (
            f"\n# Slurm {seen} leaves dynamic nodes out of the topology (fixed in 23.02.2): no switch;"
            " Slurm schedules without a topology.\n"
        )
        lines.append(f"topology: Slurm {seen} predates dynamic nodes in topology.conf (23.02.2): recorded, not applied")
    published = os.path.join(args.fsx_root, "topology")
    stamp = now or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_atomic(
        os.path.join(published, "nodes.json"),
        json.dumps(record(placed, flat, node_ids, answers, args.plugin, stamp), indent=2, sort_keys=True) + "\n",
        0o600,
    )
    # What slurmctld last read: a reconfigure that failed is tried again next time.
    applied = os.path.join(published, "applied.sha256")
    digest = hashlib.sha256(text.encode()).hexdigest()
    counts = f"({len(placed)} placed, {len(flat)} flat)"
    if not args.force and _read(args.conf) == text and (_read(applied) or "").strip() == digest:
        return lines + [f"topology: unchanged {counts}"], failure
    write_atomic(args.conf, text)
    write_atomic(os.path.join(published, "topology.conf"), text)
    if seen:
        # No reconfigure there: a file without a switch is how slurmctld already schedules
        # (step 50's file has none either), and on 22.05 a dynamic node that runs a job
        # across `scontrol reconfigure` stays ALLOCATED, with no job, once the job ends
        # (tests/daemons/test_topology_slurm.py): the hand-off then waits for it in vain.
        write_atomic(applied, digest + "\n", 0o600)
        return lines + [f"topology: wrote {args.conf} {counts}; no scontrol reconfigure (Slurm {seen})"], failure
    r = run(["scontrol", "reconfigure"], capture_output=True, text=True, check=False, timeout=120)
    if r.returncode != 0:
        why = (
            f"wrote {args.conf}, but scontrol reconfigure failed: {(r.stderr or r.stdout).strip()[:200]};"
            " applied again at the next refresh"
        )
        return lines, "; ".join(x for x in (failure, why) if x)
    write_atomic(applied, digest + "\n", 0o600)
    return lines + [f"topology: applied {args.conf} {counts}; scontrol reconfigure ok"], failure


def aws_pages(client=None):
    """DescribeInstanceTopology's `Instances`, page by page, through aws_client (boto3
    with standard retries; a throttled, denied or unreachable call is one TopologyError)."""
    try:
        from nodeside import aws_client
    except ImportError:  # on a node: aws_client.py sits next to this file
        import aws_client
    ec2 = client or aws_client.client("ec2")

    def fetch(**params):
        try:
            yield from aws_client.pages(ec2, "DescribeInstanceTopology", "Instances", **params)
        except aws_client.AwsCallError as e:
            raise TopologyError(str(e)) from e

    return fetch


def _parser():
    p = argparse.ArgumentParser(description="EC2 network topology -> Slurm topology.conf")
    p.add_argument("--fsx-root", default=os.environ.get("FSX_ROOT", ""))
    p.add_argument("--conf", default=os.environ.get("TOPOLOGY_CONF", "/etc/slurm/topology.conf"))
    p.add_argument("--plugin", choices=("tree", "block"), default=os.environ.get("TOPOLOGY_PLUGIN", "tree"))
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("refresh").add_argument("--force", action="store_true", help="apply even when unchanged")
    sub.add_parser("show")
    return p


def main(argv=None, fetch_pages=None, run=subprocess.run):
    args = _parser().parse_args(argv)
    if not args.fsx_root:
        print("topology: --fsx-root (or FSX_ROOT) is required", file=sys.stderr)
        return 2
    if args.cmd == "show":
        text = _read(os.path.join(args.fsx_root, "topology", "nodes.json"))
        print(text.rstrip() if text else f"no topology recorded under {args.fsx_root}/topology")
        return 0 if text else 3
    try:
        lines, failure = refresh(args, fetch_pages or aws_pages(), run)
    except TopologyError as e:
        print(f"topology: {e}; keeping the current topology", file=sys.stderr)
        return 3
    except Exception as e:  # noqa: BLE001 - one line, the exit code says internal
        if os.environ.get("GPU_CLUSTER_DEBUG") == "1":
            raise
        print(f"topology: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return 4
    for line in lines:
        print(line)
    if failure:
        print(f"topology: {failure}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
