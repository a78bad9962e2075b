"""Slurm line builders and rendered files, table-driven over the catalog.

The real-daemon checks (slurmctld accepts the files, a dynamic slurmd registers) are in
test_slurm_oracle.py; here every line is compared as an exact string.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from model.catalog import CATALOG
from tests.support.node_shell import fill_placeholders, max_node_count
from userdata import layout as node_layout
from userdata import slurm_conf as sc
from userdata import templating
from userdata.render import boot_files

P5 = CATALOG["p5.48xlarge"]

# slurmd --conf for every catalog type, with the boot placeholders left in.
EXPECTED_CONF_ARG = {
    "g6e.48xlarge": "NodeAddr=@NODE_ADDR@ CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 "
    "ThreadsPerCore=2 RealMemory=1494220 Gres=gpu:8 Feature=block-@NODE_BLOCK@,g6e.48xlarge",
    "p4d.24xlarge": "NodeAddr=@NODE_ADDR@ CPUs=96 Boards=1 SocketsPerBoard=2 CoresPerSocket=24 "
    "ThreadsPerCore=2 RealMemory=1120665 Gres=gpu:8 Feature=block-@NODE_BLOCK@,p4d.24xlarge",
    "p4de.24xlarge": "NodeAddr=@NODE_ADDR@ CPUs=96 Boards=1 SocketsPerBoard=2 CoresPerSocket=24 "
    "ThreadsPerCore=2 RealMemory=1120665 Gres=gpu:8 Feature=block-@NODE_BLOCK@,p4de.24xlarge",
    "p5.48xlarge": "NodeAddr=@NODE_ADDR@ CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 "
    "ThreadsPerCore=2 RealMemory=1992294 Gres=gpu:8 Feature=block-@NODE_BLOCK@,p5.48xlarge",
    "p5e.48xlarge": "NodeAddr=@NODE_ADDR@ CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 "
    "ThreadsPerCore=2 RealMemory=1992294 Gres=gpu:8 Feature=block-@NODE_BLOCK@,p5e.48xlarge",
    "p5en.48xlarge": "NodeAddr=@NODE_ADDR@ CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 "
    "ThreadsPerCore=2 RealMemory=1992294 Gres=gpu:8 Feature=block-@NODE_BLOCK@,p5en.48xlarge",
    "p6-b200.48xlarge": "NodeAddr=@NODE_ADDR@ CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 "
    "ThreadsPerCore=2 RealMemory=1992294 Gres=gpu:8 Feature=block-@NODE_BLOCK@,p6-b200.48xlarge",
}
EXPECTED_DEF_CPU_PER_GPU = {
    "g6e.48xlarge": 24,
    "p4d.24xlarge": 12,
    "p4de.24xlarge": 12,
    "p5.48xlarge": 24,
    "p5e.48xlarge": 24,
    "p5en.48xlarge": 24,
    "p6-b200.48xlarge": 24,
}
# `slurmd -C` on a real p5.48xlarge (aws/aws-parallelcluster#5797, catalog [PC-5797]).
P5_SLURMD_C = (
    "NodeName=ip-10-0-0-1 CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 "
    "ThreadsPerCore=2 RealMemory=2047961\nUpTime=0-00:10:00"
)


def test_tables_cover_the_whole_catalog():
    assert set(EXPECTED_CONF_ARG) == set(CATALOG) == set(EXPECTED_DEF_CPU_PER_GPU)


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_slurmd_conf_arg_per_type(name):
    assert sc.slurmd_conf_arg(CATALOG[name]) == EXPECTED_CONF_ARG[name]


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_def_cpu_per_gpu_is_vcpus_over_gpus(name):
    spec = CATALOG[name]
    assert sc.def_cpu_per_gpu(spec) == EXPECTED_DEF_CPU_PER_GPU[name] == spec.vcpus // spec.gpus
    conf = sc.render_slurm_files("demo", "train", spec)[node_layout.SLURM_CONF_TEMPLATE]
    assert f"\nDefCpuPerGPU={EXPECTED_DEF_CPU_PER_GPU[name]}\n" in conf


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_gres_conf_lists_eight_gpus(name):
    assert sc.gres_conf_lines(CATALOG[name]) == ["Name=gpu File=/dev/nvidia[0-7]"]
    gres = sc.render_slurm_files("demo", "train", CATALOG[name])["/etc/slurm/gres.conf"]
    assert gres.splitlines()[-1] == "Name=gpu File=/dev/nvidia[0-7]"


@pytest.mark.parametrize(
    ("gpus", "lines"),
    [
        (0, []),
        (1, ["Name=gpu File=/dev/nvidia0"]),
        (4, ["Name=gpu File=/dev/nvidia[0-3]"]),
    ],
)
def test_gres_conf_lines_by_gpu_count(gpus, lines):
    assert sc.gres_conf_lines(dataclasses.replace(P5, gpus=gpus)) == lines


def test_gpu_less_profile_has_no_gres_and_no_def_cpu_per_gpu():
    spec = dataclasses.replace(P5, name="local-test", gpus=0)
    assert sc.node_conf_line(spec, "127.0.0.1", "a") == (
        "NodeAddr=127.0.0.1 CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 "
        "ThreadsPerCore=2 RealMemory=1992294 Feature=block-a,local-test"
    )
    files = sc.render_slurm_files("demo", "train", spec)
    settings = _settings(files[node_layout.SLURM_CONF_TEMPLATE])
    assert "DefCpuPerGPU" not in settings
    assert settings["GresTypes"] == "gpu"
    assert [ln for ln in files["/etc/slurm/gres.conf"].splitlines() if not ln.startswith("#")] == []


@pytest.mark.parametrize(
    ("addr", "block", "itype", "tail"),
    [
        ("10.0.1.23", "a", None, "Feature=block-a,p5.48xlarge"),
        ("10.0.1.23", "on-demand", None, "Feature=block-on-demand,p5.48xlarge"),
        ("10.0.1.23", "blk_2", "p5.48xlarge", "Feature=block-blk_2,p5.48xlarge"),
    ],
)
def test_node_conf_line_features(addr, block, itype, tail):
    line = sc.node_conf_line(P5, addr, block, itype)
    assert line.startswith(f"NodeAddr={addr} CPUs=192 ")
    assert line.endswith(" Gres=gpu:8 " + tail)


@pytest.mark.parametrize("block", ["", "a b", "a,b", "a|b"])
def test_node_conf_line_rejects_bad_block(block):
    with pytest.raises(ValueError):
        sc.node_conf_line(P5, "10.0.0.1", block)


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_real_memory_below_measured_fraction(name):
    # The one measured figure: slurmd -C on p5.48xlarge reports 2047961 of 2097152 MiB
    # nominal (97.7 %); every type's RealMemory stays below that fraction of its nominal.
    spec = CATALOG[name]
    assert spec.real_memory_mib < spec.memory_mib * 2047961 / 2097152


def test_p5_real_memory_below_measured_slurmd_c():
    assert P5.real_memory_mib == 1992294 < 2047961


# --- slurm.conf ---------------------------------------------------------------------


def _conf(spec=P5, cluster="demo", partition="train") -> str:
    return sc.render_slurm_files(cluster, partition, spec)[node_layout.SLURM_CONF_TEMPLATE]


def _settings(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and not line.startswith("PartitionName="):
            key, _, value = line.partition("=")
            assert key not in out, f"{key} set twice"
            out[key] = value
    return out


def test_slurm_conf_settings_exact():
    assert _settings(_conf()) == {
        "ClusterName": "demo",
        "SlurmctldHost": "@CONTROLLER_HOST@(@CONTROLLER_ADDR@)",
        "SlurmUser": "root",
        "AuthType": "auth/munge",
        "MpiDefault": "none",
        "ProctrackType": "proctrack/cgroup",
        "TaskPlugin": "task/cgroup,task/affinity",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core",
        "GresTypes": "gpu",
        "DefCpuPerGPU": "24",
        "MaxNodeCount": "@MAX_NODES@",
        "TreeWidth": "65533",
        "ReturnToService": "2",
        "JobRequeue": "1",
        "PropagateResourceLimitsExcept": "MEMLOCK",
        "PlugStackConfig": "/etc/slurm/plugstack.conf",
        "StateSaveLocation": "/fsx/.gpu-cluster/demo/slurmctld",
        "SlurmdSpoolDir": "/var/spool/slurmd",
        "SlurmctldPidFile": "/run/slurmctld.pid",
        "SlurmdPidFile": "/run/slurmd.pid",
        "SlurmctldLogFile": "/var/log/slurm/slurmctld.log",
        "SlurmdLogFile": "/var/log/slurm/slurmd.log",
        "SlurmctldDebug": "info",
        "SlurmdDebug": "info",
        "SlurmctldTimeout": "300",
        "SlurmdTimeout": "300",
        "MinJobAge": "600",
        "MailProg": "/bin/true",
        "JobCompType": "jobcomp/filetxt",
        "JobCompLoc": "/fsx/.gpu-cluster/demo/slurmctld/jobcomp.log",
    }


def test_slurm_conf_has_no_node_lines_and_one_partition():
    text = _conf(partition="gpu")
    assert not re.search(r"^NodeName", text, re.MULTILINE | re.IGNORECASE)
    parts = [ln for ln in text.splitlines() if ln.startswith("PartitionName=")]
    assert parts == ["PartitionName=gpu Nodes=ALL Default=YES DefaultTime=60 MaxTime=INFINITE State=UP"]
    assert text.endswith(parts[0] + "\n")


def test_slurm_conf_placeholders_are_exactly_the_documented_ones():
    found = set(re.findall(r"@[A-Z_]+@", _conf()))
    assert found == set(sc.SLURM_PLACEHOLDERS.values())
    assert set(re.findall(r"@[A-Z_]+@", sc.slurmd_conf_arg(P5))) == set(sc.NODE_PLACEHOLDERS.values())


def test_placeholders_are_sed_safe():
    for token in [*sc.SLURM_PLACEHOLDERS.values(), *sc.NODE_PLACEHOLDERS.values()]:
        assert re.fullmatch(r"@[A-Z_]+@", token)


def test_fill_placeholders_matches_sed():
    text = _conf()
    values = {"CONTROLLER_HOST": "ip-10-0-0-5", "CONTROLLER_ADDR": "10.0.0.5", "MAX_NODES": max_node_count(16)}
    filled = fill_placeholders(text, values)
    assert "SlurmctldHost=ip-10-0-0-5(10.0.0.5)\n" in filled
    assert "MaxNodeCount=36\n" in filled
    assert "@" not in filled
    sed = ["sed"] + [a for k, v in values.items() for a in ("-e", f"s|@{k}@|{v}|g")]
    assert subprocess.run(sed, input=text, capture_output=True, text=True, check=True).stdout == filled


def test_fill_placeholders_refuses_missing_and_unsafe_values():
    with pytest.raises(ValueError, match="@MAX_NODES@"):
        fill_placeholders(_conf(), {"CONTROLLER_HOST": "h", "CONTROLLER_ADDR": "10.0.0.1"})
    with pytest.raises(ValueError, match="sed-safe"):
        fill_placeholders("@A@", {"A": "x|y"})


@pytest.mark.parametrize(("nodes", "expected"), [(1, 6), (2, 8), (16, 36), (1024, 2052), (4096, 8196)])
def test_max_node_count_is_what_step_50_puts_in_slurm_conf(nodes, expected):
    assert max_node_count(nodes) == expected
    step = boot_files()[f"{node_layout.STEPS}/50-slurm.sh"]
    assert 'max=$(max_node_count "$GPU_CLUSTER_NODES")' in step
    assert '-e "s|@MAX_NODES@|$max|g"' in step


# --- other files --------------------------------------------------------------------

EXPECTED_PATHS = {
    "/opt/gpu-cluster/templates/slurm.conf",
    "/etc/slurm/gres.conf",
    "/etc/slurm/cgroup.conf",
    "/etc/slurm/plugstack.conf",
    "/opt/gpu-cluster/templates/pyxis.conf",
    "/etc/systemd/system/slurmd.service.d/gpu-cluster.conf",
    "/etc/systemd/system/slurmctld.service.d/gpu-cluster.conf",
    "/etc/systemd/logind.conf.d/gpu-cluster.conf",
    "/opt/gpu-cluster/templates/slurmd.default",
}


def _body(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def test_render_paths_and_headers():
    files = sc.render_slurm_files("demo", "train", P5)
    assert set(files) == EXPECTED_PATHS
    for path, text in files.items():
        assert text.endswith("\n") and not text.endswith("\n\n"), path
        lines = text.splitlines()
        header = lines[1] if lines[0].startswith("#!") else lines[0]
        assert re.fullmatch(r"# Generated by gpu-cluster from slurm/[\w.-]+\.j2; do not edit", header), path


def test_cgroup_conf():
    text = sc.render_slurm_files("demo", "train", P5)["/etc/slurm/cgroup.conf"]
    assert _body(text) == [
        "CgroupPlugin=autodetect",
        "ConstrainCores=yes",
        "ConstrainDevices=no",
        "ConstrainRAMSpace=no",
    ]
    v1 = sc.render_slurm_files("demo", "train", P5, cgroup_plugin="cgroup/v1")["/etc/slurm/cgroup.conf"]
    assert _body(v1)[0] == "CgroupPlugin=cgroup/v1"
    with pytest.raises(ValueError):
        sc.render_slurm_files("demo", "train", P5, cgroup_plugin="v1")


def test_plugstack_and_pyxis():
    files = sc.render_slurm_files("demo", "train", P5)
    assert _body(files["/etc/slurm/plugstack.conf"]) == ["include /etc/slurm/plugstack.conf.d/*.conf"]
    assert _body(files["/opt/gpu-cluster/templates/pyxis.conf"]) == ["required /usr/local/lib/slurm/spank_pyxis.so"]
    other = sc.render_slurm_files(
        "demo", "train", P5, pyxis_plugin_path="/usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so"
    )
    assert _body(other["/opt/gpu-cluster/templates/pyxis.conf"]) == [
        "required /usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so"
    ]
    with pytest.raises(ValueError):
        sc.render_slurm_files("demo", "train", P5, pyxis_plugin_path="spank_pyxis.so")


def test_systemd_and_logind_dropins():
    files = sc.render_slurm_files("demo", "train", P5)
    assert _body(files["/etc/systemd/system/slurmd.service.d/gpu-cluster.conf"]) == [
        "[Unit]",
        "RequiresMountsFor=/fsx",
        "[Service]",
        "LimitMEMLOCK=infinity",
        "LimitNOFILE=131072",
        "Type=simple",
        "EnvironmentFile=/etc/default/slurmd",
        "ExecStart=",
        'ExecStart=/usr/sbin/slurmd -D -s -Z --conf "${SLURMD_NODE_CONF}" $SLURMD_OPTIONS',
        "Delegate=yes",
    ]
    assert _body(files["/etc/systemd/system/slurmctld.service.d/gpu-cluster.conf"]) == [
        "[Unit]",
        "RequiresMountsFor=/fsx",
        "[Service]",
        "LimitMEMLOCK=infinity",
        "LimitNOFILE=131072",
        "Type=simple",
        "User=root",
        "Group=root",
        "ExecStart=",
        "ExecStart=/usr/sbin/slurmctld -D -s $SLURMCTLD_OPTIONS",
    ]
    assert _body(files["/etc/systemd/logind.conf.d/gpu-cluster.conf"]) == ["[Login]", "RemoveIPC=no"]


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_slurmd_default_carries_the_node_line(name, tmp_path):
    text = sc.render_slurm_files("demo", "train", CATALOG[name])[node_layout.SLURMD_DEFAULT_TEMPLATE]
    assert _body(text) == [f'SLURMD_NODE_CONF="{EXPECTED_CONF_ARG[name]}"']
    # Filled like the boot does, the file sources to exactly one --conf argument.
    filled = fill_placeholders(text, {"NODE_ADDR": "10.0.7.9", "NODE_BLOCK": "a"})
    env = tmp_path / "slurmd"
    env.write_text(filled)
    out = subprocess.run(
        ["bash", "-c", f'. "{env}"; printf "%s" "$SLURMD_NODE_CONF"'], capture_output=True, text=True, check=True
    ).stdout
    assert out == sc.node_conf_line(CATALOG[name], "10.0.7.9", "a")


@pytest.mark.parametrize("unit", ["slurmd", "slurmctld"])
def test_systemd_dropins_parse(tmp_path, unit):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    files = sc.render_slurm_files("demo", "train", P5)
    # The installed package unit when there is one (its ExecStart is what the drop-in
    # resets), else a stand-in.
    service = tmp_path / f"{unit}.service"
    package_unit = Path("/lib/systemd/system") / f"{unit}.service"
    service.write_text(
        package_unit.read_text()
        if package_unit.exists()
        else f"[Unit]\nDescription=test\n[Service]\nType=simple\nExecStart=/bin/true {unit}\n"
    )
    drop = tmp_path / f"{unit}.service.d"
    drop.mkdir()
    (drop / "gpu-cluster.conf").write_text(files[f"/etc/systemd/system/{unit}.service.d/gpu-cluster.conf"])
    r = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(service)],
        capture_output=True,
        text=True,
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"},
    )
    problems = [ln for ln in r.stderr.splitlines() if str(tmp_path) in ln]
    assert problems == [], r.stderr


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_render_is_byte_stable(name):
    a = sc.render_slurm_files("demo", "train", CATALOG[name])
    templating.environment.cache_clear()
    b = sc.render_slurm_files("demo", "train", CATALOG[name])
    assert a == b
    assert list(a) == list(b)


def test_render_does_not_depend_on_node_count_or_block():
    # Nothing node-count- or block-specific goes into the rendered bytes: both are
    # boot-time placeholders.
    files = sc.render_slurm_files("demo", "train", P5)
    joined = "".join(files.values())
    assert "@MAX_NODES@" in joined
    assert re.findall(r"block-\S*", joined) == ['block-@NODE_BLOCK@,p5.48xlarge"']


# --- check-slurmd-c.sh ----------------------------------------------------------------


@pytest.fixture
def check_script(tmp_path) -> Path:
    path = tmp_path / "check-slurmd-c.sh"
    path.write_text(boot_files()[node_layout.CHECK_SLURMD_C])
    path.chmod(0o755)
    return path


def _run_check(script: Path, tmp_path: Path, slurmd_output: str, rc: int = 0):
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    slurmd = fake / "slurmd"
    (tmp_path / "out.txt").write_text(slurmd_output)
    slurmd.write_text(f'#!/bin/sh\n[ "$1" = "-C" ] || exit 64\ncat "{tmp_path / "out.txt"}"\nexit {rc}\n')
    slurmd.chmod(slurmd.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SLURM_NODE_HARDWARE": sc.node_hardware(P5)}
    return subprocess.run([str(script)], capture_output=True, text=True, env=env, timeout=10)


_OK = "NodeName=n CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 ThreadsPerCore=2 RealMemory={mem}\nUpTime=0-00:01:00\n"


@pytest.mark.parametrize(
    ("output", "rc", "ok", "reason"),
    [
        (P5_SLURMD_C, 0, True, "ok"),
        (_OK.format(mem=1992294), 0, True, "ok"),  # exactly the configured RealMemory
        (_OK.format(mem=1992293), 0, False, "RealMemory 1992293 MiB found is below the 1992294 MiB configured"),
        (_OK.format(mem=2047961).replace("CPUs=192", "CPUs=96"), 0, False, "CPUs differs (96 found, 192 configured)"),
        (
            _OK.format(mem=2047961).replace("SocketsPerBoard=2", "SocketsPerBoard=8"),
            0,
            False,
            "SocketsPerBoard differs (8 found, 2 configured)",
        ),
        (
            _OK.format(mem=2047961).replace("CoresPerSocket=48", "CoresPerSocket=12"),
            0,
            False,
            "CoresPerSocket differs (12 found, 48 configured)",
        ),
        (
            _OK.format(mem=2047961).replace("ThreadsPerCore=2", "ThreadsPerCore=1"),
            0,
            False,
            "ThreadsPerCore differs (1 found, 2 configured)",
        ),
        (_OK.format(mem=2047961).replace("Boards=1", "Boards=2"), 0, False, "Boards differs (2 found, 1 configured)"),
        (
            _OK.format(mem=2047961).replace(" ThreadsPerCore=2", ""),
            0,
            False,
            "slurmd -C does not report ThreadsPerCore",
        ),
        (_OK.format(mem="lots"), 0, False, "RealMemory is not a number"),
        ("slurmd: fatal: something broke\n", 1, False, "slurmd -C failed"),
    ],
)
def test_check_slurmd_c(check_script, tmp_path, output, rc, ok, reason):
    r = _run_check(check_script, tmp_path, output, rc)
    first = output.splitlines()[0]
    configured = "configured: CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 ThreadsPerCore=2 RealMemory=1992294"
    if ok:
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ["check-slurmd-c: ok", f"  {configured}", f"  slurmd -C:  {first}"]
    else:
        assert r.returncode == 1
        # Both lines are printed so the boot log shows what to fix.
        assert r.stderr.splitlines() == [f"check-slurmd-c: {reason}", f"  {configured}", f"  slurmd -C:  {first}"]


def test_check_slurmd_c_reads_cluster_env_when_run_by_hand(check_script, tmp_path):
    # step 50 exports cluster.env; by hand (no SLURM_NODE_HARDWARE) the script reads it
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "cluster.env").write_text(f"SLURM_NODE_HARDWARE='{sc.node_hardware(P5)}'\n")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "slurmd").write_text(f"#!/bin/sh\nprintf '%s\\n' '{_OK.format(mem=1992294).splitlines()[0]}'\n")
    (fake / "slurmd").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "SLURM_NODE_HARDWARE"}
    env.update(PATH=f"{fake}:{os.environ['PATH']}", GPU_CLUSTER_ETC=str(etc))
    r = subprocess.run([str(check_script)], capture_output=True, text=True, env=env, timeout=10)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1] == f"  configured: {sc.node_hardware(P5)}"
    (etc / "cluster.env").write_text("")
    r = subprocess.run([str(check_script)], capture_output=True, text=True, env=env, timeout=10)
    assert r.returncode != 0 and "SLURM_NODE_HARDWARE is not set (cluster.env)" in r.stderr


def test_check_script_shellcheck_and_bash_n(check_script):
    assert subprocess.run(["bash", "-n", str(check_script)], capture_output=True, text=True).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is required (apt-get install shellcheck)")
    r = subprocess.run(["shellcheck", "-s", "bash", str(check_script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_health_check_lines_follow_the_health_section():
    from model.health import HealthConfig

    conf = sc.render_slurm_files("demo", "train", P5, health=HealthConfig())[node_layout.SLURM_CONF_TEMPLATE]
    settings = _settings(conf)
    assert settings["HealthCheckProgram"] == "/opt/gpu-cluster/bin/gpu-cluster-health"
    assert settings["HealthCheckInterval"] == "300"
    assert settings["HealthCheckNodeState"] == "ANY"
    idle = HealthConfig(interval_seconds=120, node_states=("IDLE", "MIXED", "IDLE"), cycle=True)
    assert sc.health_settings(idle) == [
        ("HealthCheckProgram", "/opt/gpu-cluster/bin/gpu-cluster-health"),
        ("HealthCheckInterval", "120"),
        ("HealthCheckNodeState", "IDLE,MIXED,CYCLE"),
    ]
    assert sc.health_settings(HealthConfig(node_states=("ANY", "IDLE")))[-1] == ("HealthCheckNodeState", "ANY")
    assert sc.health_settings(HealthConfig(enabled=False)) == []
    assert "HealthCheck" not in sc.render_slurm_files("demo", "train", P5)[node_layout.SLURM_CONF_TEMPLATE]
