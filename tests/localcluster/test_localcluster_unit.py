"""The local cluster's fast part: no daemons, no root.

The IMDSv2 stand-in, user data read back the way cloud-init reads it, the namespace
lane's overrides, and what a faithful-lane machine is given before it boots (NoCloud
seed, cloud-init settings, overrides merged over the image's, nspawn's arguments).
The daemon parts are tests/daemons/test_localcluster.py (namespace lane) and
tests/daemons/test_localcluster_faithful.py (systemd-nspawn machines).
"""

from __future__ import annotations

import base64
import gzip
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from localcluster import imds, machine, profile
from localcluster.cluster import OVERRIDES, boot_command, overrides_env
from tests.support.localcluster_inputs import _user_data

# ---------------------------------------------------------------------------------
# IMDSv2 stand-in
# ---------------------------------------------------------------------------------
IDENTITY = {
    "instance_id": "i-0123456789abcdef0",
    "local_ipv4": "10.77.0.11",
    "local_hostname": "ip-10-77-0-11.us-east-2.compute.internal",
    "availability_zone": "us-east-2b",
    "tags": {
        "GpuClusterName": "local",
        "GpuClusterRole": "controller",
        "GpuClusterNodes": "2",
        "GpuClusterBlock": "on-demand",
    },
}


@pytest.fixture(scope="module")
def imds_url():
    handler = type("H", (imds.Handler,), {"tree": imds.metadata_tree(IDENTITY), "tokens": {}, "log_path": None})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _req(url, method="GET", headers=None):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def _token(base, ttl="60"):
    code, token = _req(f"{base}/latest/api/token", "PUT", {"X-aws-ec2-metadata-token-ttl-seconds": ttl})
    assert code == 200
    return token


@pytest.mark.parametrize(
    "path,value",
    [
        ("meta-data/instance-id", "i-0123456789abcdef0"),
        ("meta-data/local-ipv4", "10.77.0.11"),
        ("meta-data/local-hostname", "ip-10-77-0-11.us-east-2.compute.internal"),
        ("meta-data/placement/availability-zone", "us-east-2b"),
        ("meta-data/tags/instance/GpuClusterName", "local"),
        ("meta-data/tags/instance/GpuClusterRole", "controller"),
        ("meta-data/tags/instance/GpuClusterNodes", "2"),
        ("meta-data/tags/instance/GpuClusterBlock", "on-demand"),
        ("meta-data/tags/instance", "GpuClusterBlock\nGpuClusterName\nGpuClusterNodes\nGpuClusterRole"),
    ],
)
def test_imds_answers_contract_paths_with_a_token(imds_url, path, value):
    assert _req(f"{imds_url}/latest/{path}", headers={"X-aws-ec2-metadata-token": _token(imds_url)}) == (200, value)


@pytest.mark.parametrize(
    "headers,code",
    [
        ({}, 401),  # IMDSv1 style: refused
        ({"X-aws-ec2-metadata-token": "not-a-token"}, 401),
    ],
)
def test_imds_rejects_requests_without_a_valid_token(imds_url, headers, code):
    assert _req(f"{imds_url}/latest/meta-data/instance-id", headers=headers)[0] == code


@pytest.mark.parametrize("ttl,code", [(None, 400), ("0", 400), ("21601", 400), ("abc", 400), ("21600", 200)])
def test_imds_token_needs_a_ttl_header_in_range(imds_url, ttl, code):
    headers = {} if ttl is None else {"X-aws-ec2-metadata-token-ttl-seconds": ttl}
    assert _req(f"{imds_url}/latest/api/token", "PUT", headers)[0] == code


def test_imds_unknown_path_and_absent_tag_are_404(imds_url):
    h = {"X-aws-ec2-metadata-token": _token(imds_url)}
    assert _req(f"{imds_url}/latest/meta-data/tags/instance/Nope", headers=h)[0] == 404
    assert _req(f"{imds_url}/latest/meta-data/iam/info", headers=h)[0] == 404


def test_parse_user_data_decodes_every_write_files_encoding():
    raw = _user_data(
        {
            "write_files": [
                {"path": "/a/text", "content": "plain\n"},
                {
                    "path": "/a/b64",
                    "encoding": "b64",
                    "content": base64.b64encode(b"\x00bin").decode(),
                    "permissions": "0755",
                    "owner": "root:root",
                },
                {
                    "path": "/a/gz",
                    "encoding": "gz+b64",
                    "content": base64.b64encode(gzip.compress(b"zipped", mtime=0)).decode(),
                    "permissions": "0400",
                    "owner": "munge:munge",
                },
            ],
            "runcmd": [["/opt/gpu-cluster/bin/gpu-cluster-boot"]],
        },
        script=b"#!/bin/sh\necho hi\n",
    )
    files, runcmd, scripts = profile.parse_user_data(raw)
    assert {p: (f.content, f.permissions, f.owner) for p, f in files.items()} == {
        "/a/text": (b"plain\n", 0o644, "root:root"),
        "/a/b64": (b"\x00bin", 0o755, "root:root"),
        "/a/gz": (b"zipped", 0o400, "munge:munge"),
    }
    assert runcmd == [["/opt/gpu-cluster/bin/gpu-cluster-boot"]]
    assert scripts == [b"#!/bin/sh\necho hi\n"]


@pytest.mark.parametrize(
    "runcmd,expected",
    [
        ([["/opt/gpu-cluster/bin/gpu-cluster-boot"]], "set -e\n/opt/gpu-cluster/bin/gpu-cluster-boot"),
        (["/opt/gpu-cluster/bin/gpu-cluster-boot --once"], "set -e\n/opt/gpu-cluster/bin/gpu-cluster-boot --once"),
        ([], "/opt/gpu-cluster/bin/gpu-cluster-boot"),
    ],
)
def test_boot_command_follows_runcmd_or_the_contract_entry_point(runcmd, expected):
    assert boot_command(runcmd) == expected


def _sourced(text: bytes, names) -> dict[str, str]:
    """What a node's bash sees after `source overrides.env` (set -e: a syntax error fails)."""
    script = "set -euo pipefail; source /dev/stdin; " + "; ".join(f'printf "%s\\0" "${n}"' for n in names)
    r = subprocess.run(["bash", "-c", script], input=text, capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    return dict(zip(names, r.stdout.decode().split("\0")[:-1], strict=True))


def test_overrides_are_exactly_the_documented_swaps():
    text = overrides_env()
    assert text.decode().splitlines() == [
        "AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:1338",
        "GPU_CLUSTER_SERVICE_MANAGER=direct",
        "GPU_CLUSTER_PACKAGES=preinstalled",
        "CLOUDWATCH_SKIP='the local lanes have no route to Amazon'\"'\"'s CloudWatch agent downloads or to CloudWatch'",
    ]
    # The nodes source the file: every value arrives whole (the reason has spaces and a quote).
    assert _sourced(text, list(OVERRIDES)) == OVERRIDES
    assert set(OVERRIDES) == {
        "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        "GPU_CLUSTER_SERVICE_MANAGER",
        "GPU_CLUSTER_PACKAGES",
        "CLOUDWATCH_SKIP",
    }


def test_machine_overrides_keep_the_baked_lines_and_quote_the_hosts_swaps(tmp_path):
    from localcluster.machine import OVERRIDES as BAKED_PATH
    from localcluster.machine import merged_overrides

    baked = tmp_path / BAKED_PATH
    baked.parent.mkdir(parents=True)
    baked.write_text("SLURM_SERIES=23.11\nDOWNLOAD_SHA256='a=1 b=2'\n")
    swaps = {"CLOUDWATCH_SKIP": "no route to Amazon's agent", "JOIN_SETTLE": "10"}
    text = merged_overrides(tmp_path, swaps)
    assert _sourced(text, ["SLURM_SERIES", "DOWNLOAD_SHA256", *swaps]) == {
        "SLURM_SERIES": "23.11",
        "DOWNLOAD_SHA256": "a=1 b=2",
        **swaps,
    }


HOST = "NodeName=vm CPUs=8 Boards=1 SocketsPerBoard=2 CoresPerSocket=2 ThreadsPerCore=2 RealMemory=32000\n"


def test_rendered_user_data_ships_every_node_file_and_runs_the_entry_point(tmp_path):
    ud = profile.render("local", 2, str(tmp_path), spec=profile.test_instance_spec(profile.slurmd_facts(HOST)))
    assert profile.parity_problems(ud) == []
    assert "/etc/gpu-cluster/cluster.env" in ud.files  # cloud-config write_files, always inline
    assert len(ud.scripts) == 1 and b"exec /opt/gpu-cluster/bin/gpu-cluster-boot" in ud.scripts[0]
    if ud.payload is not None:  # the local form of the S3 payload: a file:// URI under payload_dir
        assert f"file://{tmp_path}/{ud.payload[0]}.tar.gz".encode() in ud.scripts[0]


@pytest.mark.parametrize("name", ["", "a", "Local", "local-2", "toolongname", "9lives"])
def test_cluster_names_cannot_collide_in_namespace_prefixes(name):
    from localcluster.nodes import Cluster

    with pytest.raises(ValueError):
        Cluster(name)


def test_test_profile_is_measured_from_slurmd_c_without_gpus():
    facts = profile.slurmd_facts(
        "NodeName=vm CPUs=8 Boards=1 SocketsPerBoard=2 CoresPerSocket=2 "
        "ThreadsPerCore=2 RealMemory=32000\nUpTime=0-00:06:45\n"
    )
    spec = profile.test_instance_spec(facts)
    assert (spec.vcpus, spec.sockets, spec.cores_per_socket, spec.threads_per_core) == (8, 2, 2, 2)
    assert (spec.gpus, spec.efa_count, spec.memory_mib) == (0, 0, 32000)
    assert spec.real_memory_mib < 32000


def test_nspawn_boots_systemd_in_the_nodes_network_namespace_without_machined(tmp_path):
    argv = machine.nspawn_argv(
        tmp_path / "root",
        "ip-10-77-6-11",
        Path("/var/run/netns/gcl-x-1"),
        [("/srv/fsx", "/fsx", False), ("/srv/payload", "/srv/payload", True)],
    )
    assert argv[0] == "systemd-nspawn"
    for flag in (
        "--boot",
        "--register=no",
        "--keep-unit",
        "--machine=ip-10-77-6-11",
        "--network-namespace-path=/var/run/netns/gcl-x-1",
        "--bind=/srv/fsx:/fsx",
        "--bind-ro=/srv/payload:/srv/payload",
        "--rlimit=RLIMIT_MEMLOCK=infinity",
    ):
        assert flag in argv
    assert argv[argv.index("-D") + 1] == str(tmp_path / "root")


def test_cgroup_unit_command_is_valid_shell_after_systemd_unescaping():
    line = next(x for x in machine.CGROUP_UNIT_TEXT.splitlines() if x.startswith("ExecStart="))
    cmd = line.split("-c ", 1)[1].strip("'").replace("$$", "$").replace("%%", "%")
    assert "mount -o remount,bind,rw" in cmd
    r = subprocess.run(["sh", "-n", "-c", cmd], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _fake_nspawn(tmp_path, codes: list[int]) -> list[str]:
    """A stand-in for systemd-nspawn that exits with codes[n] on its n-th run."""
    script = tmp_path / "fake-nspawn"
    script.write_text(
        '#!/bin/bash\nn=$(cat "$1" 2>/dev/null || echo 0); echo $((n + 1)) >"$1"\n'
        f"codes=({' '.join(map(str, codes))}); exit ${{codes[$n]}}\n"
    )
    script.chmod(0o755)
    return [str(script), str(tmp_path / "runs")]


def _wait_exit(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            return
        time.sleep(0.05)
    raise AssertionError(f"supervisor {pid} still running")


def test_supervisor_boots_the_machine_again_after_a_reboot_and_stops_on_poweroff(tmp_path):
    pid = machine.start(tmp_path, _fake_nspawn(tmp_path, [machine.REBOOT_EXIT, machine.REBOOT_EXIT, 0]), [])
    _wait_exit(pid)
    assert (tmp_path / "runs").read_text() == "3\n"  # reboot, reboot, poweroff
    log = (tmp_path / "console.log").read_text()
    assert "supervisor: boot 3" in log and "nspawn exited 0" in log and "boot 4" not in log


def test_supervisor_does_not_boot_a_stopped_machine_again(tmp_path):
    (tmp_path / "stop").write_text("1\n")  # machine.start clears a previous stop ...
    argv = _fake_nspawn(tmp_path, [machine.REBOOT_EXIT, 0])
    pid = machine.start(tmp_path, ["bash", "-c", f'touch {tmp_path}/stop; exec "$@"', "x", *argv], [])
    _wait_exit(pid)  # ... and a stop requested while it runs wins over the reboot exit
    assert (tmp_path / "runs").read_text() == "1\n"


def test_local_cluster_lanes_are_checked():
    from localcluster.cluster import LANES, LocalCluster

    assert LANES == ("bookworm", "trixie", "slurm2311", "namespace")
    with pytest.raises(ValueError, match="lane 'jammy'"):
        LocalCluster("lanechk", lane="jammy")


def test_local_cluster_images_are_checked():
    from localcluster.cluster import IMAGES, LocalCluster

    assert IMAGES == ("baked", "plain")
    with pytest.raises(ValueError, match="image 'golden'"):
        LocalCluster("imgchk", image="golden")


def test_boot_log_steps_and_waits_are_read_to_a_tenth_of_a_second_and_split_into_work():
    """What the bench reports per step: its time from the entry point's line, and its own
    work (that time less the bounded waits the step logged)."""
    from localcluster.cluster import BootWatch, LocalCluster, summary
    from localcluster.nodes import Node

    lc = LocalCluster("sumchk", out=lambda s="": None)
    node = Node(cluster="sumchk", serial=11, hostname="ip-10-77-0-11", ip="10.77.0.11", instance_id="i-0", role="worker",
                netns="n", veth="v", dir="/nonexistent")  # fmt: skip
    w = BootWatch(node, None)
    for line in (
        "2026-12-02T05:33:00Z [50-slurm] waiting up to 300s for slurmctld to register x (scontrol show node)",
        "2026-12-02T05:33:01Z [50-slurm] done waiting after 0.8s: slurmctld to register x (scontrol show node)",
        "2026-12-02T05:33:02Z [boot] end 50-slurm ok after 1.9s",
        "2026-12-02T05:33:02Z [boot] FAILED 60-enroot after 0.2s: /run/enroot is not 1777 (see /var/log/x)",
    ):
        lc._line(w, line)
    assert [(s.step, s.state, s.seconds) for s in w.steps] == [("50-slurm", "ok", 1.9), ("60-enroot", "failed", 0.2)]
    row = summary([w])["ip-10-77-0-11"]
    assert row["step_work"] == {"50-slurm": pytest.approx(1.1), "60-enroot": 0.2}
    assert row["wait_kinds"] == {"registration in slurmctld": 0.8}


def test_a_failed_boot_says_its_last_lines_and_every_node_and_job_as_the_controllers_slurm_sees_them():
    """A timed-out wait in one node's boot is about another node: the lane's report shows the
    failed node's log and then each node's Slurm state and reason (a health drain, a node down)."""
    from localcluster.cluster import BootWatch, LocalCluster
    from localcluster.nodes import Node

    said: list[str] = []
    lc = LocalCluster("failchk", out=said.append)
    node = Node(cluster="failchk", serial=11, hostname="ip-10-77-0-11", ip="10.77.0.11", instance_id="i-0", role="controller",
                netns="n", veth="v", dir="/nonexistent")  # fmt: skip
    lc.log_tail = lambda n, k: ["[95-handoff] ERROR: timed out"]  # type: ignore[method-assign]
    lc.node_reasons = lambda: {  # type: ignore[method-assign]
        "ip-10-77-0-12": ("drained", "gpu-cluster health: clock reference 127.0.0.1:1123 did not answer"),
        "ip-10-77-0-11": ("idle", ""),
    }
    lc.queue_rows = lambda: ["7 gpu-cluster-pmix-check root RUNNING 9:58 ip-10-77-0-12"]  # type: ignore[method-assign]
    with pytest.raises(RuntimeError) as raised:
        lc._raise_failed([BootWatch(node, None, rc=1)])
    # One line: a test report's summary keeps only the error's first line.
    assert str(raised.value) == (
        "boot failed on ip-10-77-0-11 (exit 1: [95-handoff] ERROR: timed out); Slurm's nodes: ip-10-77-0-11 idle, "
        "ip-10-77-0-12 drained (gpu-cluster health: clock reference 127.0.0.1:1123 did not answer); "
        "queue: 7 gpu-cluster-pmix-check root RUNNING 9:58 ip-10-77-0-12"
    )
    assert said == [
        "ip-10-77-0-11: boot FAILED (exit 1); last log lines:",
        "    [95-handoff] ERROR: timed out",
        "Slurm's nodes (sinfo on the controller):",
        "    ip-10-77-0-11 idle",
        "    ip-10-77-0-12 drained (gpu-cluster health: clock reference 127.0.0.1:1123 did not answer)",
        "Slurm's queue (squeue on the controller):",
        "    7 gpu-cluster-pmix-check root RUNNING 9:58 ip-10-77-0-12",
    ]
    lc._raise_failed([])  # nothing failed: nothing said, nothing raised
    assert len(said) == 7
    lc.log_tail = lambda n, k: []  # type: ignore[method-assign]
    lc.node_reasons = lambda: {}  # type: ignore[method-assign]
    lc.queue_rows = lambda: []  # type: ignore[method-assign]
    with pytest.raises(
        RuntimeError,
        match=r"^boot failed on ip-10-77-0-11 \(exit None\); Slurm's nodes: no answer; queue: empty or no answer$",
    ):
        lc._raise_failed([BootWatch(node, None)])


def test_host_polls_start_short_and_back_off_to_a_cap():
    from itertools import islice

    from localcluster.cluster import pauses

    got = list(islice(pauses(0.1, 1.0), 8))
    assert got[:3] == [0.1, pytest.approx(0.15), pytest.approx(0.225)]
    assert got[-1] == 1.0 and all(b >= a for a, b in zip(got, got[1:], strict=False))


@pytest.mark.parametrize(
    "have,machines,after",
    [("128\n", 32, "8192\n"), ("200\n", 5, "200\n"), ("20000\n", 2000, "20000\n"), ("128\n", 2000, "16128\n")],
)
def test_host_inotify_limit_is_raised_for_many_machines_and_never_lowered(tmp_path, monkeypatch, have, machines, after):
    knob = tmp_path / "max_user_instances"
    knob.write_text(have)
    monkeypatch.setattr(machine, "INOTIFY_INSTANCES", knob)
    said = machine.ensure_inotify(machines)
    assert knob.read_text() == after
    assert (said is None) == (have == after)


# ---------------------------------------------------------------------------------
# the dedicated controller and a second block's machines (tests/daemons/test_controller_faithful.py)
# ---------------------------------------------------------------------------------
def test_local_config_expresses_the_dedicated_controller_and_keeps_the_default_stack():
    default = profile.local_config("local", 2)
    assert not default.controller.dedicated and default.capacity.nodes == 2
    assert profile.local_config("local", 2, placement="block") == default
    ded = profile.local_config("local", 2, placement="dedicated")
    assert ded.controller.dedicated and ded.capacity.nodes == 2  # workers only: the controller is besides them
    assert profile.local_config("local", 1, placement="dedicated").capacity.nodes == 2  # capacity.nodes' minimum
    with pytest.raises(ValueError, match="controller placement 'gpu'"):
        profile.local_config("local", 2, placement="gpu")


def _cluster_env(placement: str, tmp_path) -> bytes:
    spec = profile.test_instance_spec(profile.slurmd_facts(HOST))
    ud = profile.render("local", 2, str(tmp_path), spec=spec, placement=placement)
    assert profile.parity_problems(ud) == []
    return ud.files["/etc/gpu-cluster/cluster.env"].content


def test_dedicated_placement_reaches_the_nodes_cluster_env(tmp_path):
    assert b"CONTROLLER_DEDICATED=1\n" in _cluster_env("dedicated", tmp_path)
    assert b"CONTROLLER_DEDICATED" not in _cluster_env("block", tmp_path)


@pytest.mark.parametrize(
    "n,dedicated,block,plan",
    [
        (2, False, "on-demand", ("on-demand", 1)),  # today's cluster: the controller is one of the 2
        (3, False, "a", ("a", 2)),  # colocated: the controller is one of block a's machines
        (2, True, "a", ("on-demand", 2)),  # dedicated: on demand, and every block node is a worker
        (3, True, "on-demand", ("on-demand", 3)),
    ],
)
def test_launch_plan_follows_the_programs_node_groups(n, dedicated, block, plan):
    from localcluster.cluster import launch_plan
    from model.capacity import node_groups

    assert launch_plan(n, dedicated, block) == plan
    cfg = profile.local_config("local", n, placement="dedicated" if dedicated else "block")
    groups = node_groups(cfg.capacity, cfg.controller.dedicated)
    assert [(g.role, g.size) for g in groups] == [("controller", 1), ("worker", plan[1])]


def test_a_node_remembers_its_block_and_old_state_files_load_as_on_demand():
    from dataclasses import asdict

    from localcluster.nodes import Node

    node = Node("local", 1, "10.77.0.11", "ip-10-77-0-11", "i-0abc", "worker", "gcl-local-1", "gcllocal1", "/tmp/x")
    old = asdict(node)
    del old["block"]  # written before nodes had a block
    assert Node(**old).block == "on-demand"
    assert Node(**{**old, "block": "b"}).block == "b"


def test_local_cluster_placement_is_checked_and_the_cli_takes_blocks():
    from localcluster.cli import _parser
    from localcluster.cluster import LocalCluster

    with pytest.raises(ValueError, match="controller placement 'gpu'"):
        LocalCluster("placechk", placement="gpu")
    assert LocalCluster("placechk", placement="dedicated").dedicated
    assert not LocalCluster("placechk").dedicated
    a = _parser().parse_args(["up", "--controller", "dedicated", "--block", "a", "-n", "2"])
    assert (a.controller, a.block, a.nodes) == ("dedicated", "a", 2)
    a = _parser().parse_args(["launch-block", "b", "--nodes", "3"])
    assert (a.cmd, a.block, a.nodes) == ("launch-block", "b", 3)
    assert _parser().parse_args(["end-block", "a"]).block == "a"
    with pytest.raises(SystemExit):
        _parser().parse_args(["up", "--controller", "gpu"])


def test_a_failed_boot_shows_slurmctlds_log_and_the_slurmd_log_of_each_node_that_is_not_idle(tmp_path):
    """A node Slurm keeps ALLOCATED with no job in the queue (a CI lane's stalled hand-off):
    the report shows what the daemons logged about it."""
    from localcluster.cluster import BootWatch, LocalCluster
    from localcluster.nodes import Node

    said: list[str] = []
    lc = LocalCluster("logchk", out=said.append)
    nodes = {}
    for serial, role in ((11, "controller"), (12, "worker"), (13, "worker")):
        host = f"ip-10-77-0-{serial}"
        nodes[host] = Node(cluster="logchk", serial=serial, hostname=host, ip=f"10.77.0.{serial}", instance_id="i-0",
                           role=role, netns="n", veth="v", dir=str(tmp_path / host))  # fmt: skip
        logs = tmp_path / host / "upper" / "var-log" / "slurm"
        logs.mkdir(parents=True)
        (logs / "slurmd.log").write_text("".join(f"{host} slurmd line {i}\n" for i in range(20)))
        if role == "controller":
            (logs / "slurmctld.log").write_text("".join(f"ctld line {i}\n" for i in range(50)))
    lc.c.nodes = nodes
    lc.log_tail = lambda n, k: []  # type: ignore[method-assign]
    lc.node_reasons = lambda: {  # type: ignore[method-assign]
        "ip-10-77-0-11": ("allocated", ""),
        "ip-10-77-0-12": ("idle", ""),
        "ip-10-77-0-13": ("down", "gone"),
    }
    lc.queue_rows = lambda: []  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        lc._raise_failed([BootWatch(nodes["ip-10-77-0-11"], None)])
    at = said.index("ip-10-77-0-11:/var/log/slurm/slurmctld.log (last 40 lines):")
    assert said[at + 1 : at + 41] == [f"    ctld line {i}" for i in range(10, 50)]
    assert said[at + 41] == "ip-10-77-0-11:/var/log/slurm/slurmd.log (last 15 lines):"
    assert said[at + 42 : at + 57] == [f"    ip-10-77-0-11 slurmd line {i}" for i in range(5, 20)]
    assert said[at + 57] == "ip-10-77-0-13:/var/log/slurm/slurmd.log (last 15 lines):"
    assert len(said) == at + 73 and not any("ip-10-77-0-12 slurmd" in line for line in said)
