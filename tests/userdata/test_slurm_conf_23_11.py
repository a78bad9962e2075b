"""Every rendered slurm.conf, cgroup.conf and gres.conf is accepted by Slurm 23.11.

The nodes run Ubuntu 24.04's Slurm 23.11, which no Debian archive has; its keys and values
are model/slurm_keys_23_11.json, taken from the 23.11.4 release source
(tests/offline/test_slurm_key_table.py keeps it equal to the source). Checked here:
the golden files of every catalog type, both shipped stack files, the local lanes' render
and the node line every slurmd registers with, with the boot's placeholders filled as step
50 fills them.

cgroup v2: the DLAMI mounts only the unified hierarchy, where CgroupPlugin=autodetect
resolves to cgroup/v2 (Slurm's autodetect_cgroup_version). This machine's hierarchy is
v1, so no lane runs cgroup/v2 (docs/node-contract.md); what can be checked here is that
23.11 accepts every cgroup.conf key we render under both plugins, that nothing we render
is a v1-only setting, and that slurmd's unit delegates its cgroup subtree (cgroup/v2
creates its step scopes there and requires Delegate=yes).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from localcluster import profile
from model.catalog import CATALOG, SUPPORTED_INSTANCE_TYPES
from model.config import parse_config
from model.slurm_keys import table_23_11
from stackfile.reader import read_stack_file
from userdata import layout, slurm_conf

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests/golden/userdata"
T = table_23_11()
CONF_FILES = ("slurm.conf", "cgroup.conf", "gres.conf")
# What step 50 puts in place of the placeholders (values of the shape it computes).
BOOT_VALUES = {
    "@CONTROLLER_HOST@": "ip-10-0-1-5",
    "@CONTROLLER_ADDR@": "10.0.1.5",
    "@MAX_NODES@": "36",
    "@NODE_ADDR@": "10.0.1.6",
    "@NODE_BLOCK@": "block-a",
}


def _filled(text: str) -> str:
    for placeholder, value in BOOT_VALUES.items():
        text = text.replace(placeholder, value)
    assert not re.search(r"@[A-Z_]+@", text), f"an unfilled placeholder: {text}"
    return text


def _conf_name(path: str) -> str | None:
    name = Path(path).name
    return name if name in CONF_FILES else None


def _check(files: dict[str, str]) -> list[str]:
    seen, problems = set(), []
    for path, text in sorted(files.items()):
        conf = _conf_name(path)
        if conf:
            seen.add(conf)
            problems += [f"{path}:{p}" for p in T.problems(conf, _filled(text))]
    assert seen == set(CONF_FILES), f"not every file was rendered: {sorted(seen)}"
    return problems


def _node_line(files: dict[str, str]) -> str:
    text = files[layout.SLURMD_DEFAULT_TEMPLATE]
    (line,) = re.findall(r'^SLURMD_NODE_CONF="(.*)"$', text, re.M)
    return line


def test_golden_files_of_every_type_are_accepted_by_23_11():
    golden = sorted(p for p in GOLDEN.rglob("*") if _conf_name(str(p)))
    types = {p.relative_to(GOLDEN).parts[0] for p in golden if p.name == "slurm.conf"}
    assert types == set(SUPPORTED_INSTANCE_TYPES)
    problems = [f"{p.relative_to(GOLDEN)}:{x}" for p in golden for x in T.problems(p.name, _filled(p.read_text()))]
    assert problems == []


def _stack_files(stack: str) -> dict[str, str]:
    raw, _, _, problems = read_stack_file(ROOT / f"Pulumi.{stack}.yaml", ROOT)
    assert problems == []
    cfg = parse_config(raw)
    return slurm_conf.render_slurm_files(
        cfg.name, cfg.slurm.partition, CATALOG[cfg.instance_type],
        default_time_minutes=cfg.slurm.default_time_minutes, health=cfg.health,
    )  # fmt: skip


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_shipped_stacks_render_files_23_11_accepts(stack):
    files = _stack_files(stack)
    assert _check(files) == []
    assert T.problems("slurm.conf", "NodeName=ip-10-0-1-6 " + _filled(_node_line(files))) == []


@pytest.mark.parametrize("instance_type", SUPPORTED_INSTANCE_TYPES)
def test_every_types_node_line_is_a_node_line_23_11_accepts(instance_type):
    line = slurm_conf.slurmd_conf_arg(CATALOG[instance_type])
    pairs, rest = T.pairs(_filled(line))
    assert rest == "" and {k for k, _ in pairs} >= {"NodeAddr", "CPUs", "RealMemory", "Feature"}
    assert T.problems("slurm.conf", f"NodeName=ip-10-0-1-6 {_filled(line)}") == []


def test_the_local_lanes_render_is_accepted_by_23_11():
    spec = profile.test_instance_spec(profile.slurmd_facts("NodeName=x CPUs=2 Boards=1 SocketsPerBoard=1 "
                                                           "CoresPerSocket=2 ThreadsPerCore=1 RealMemory=4096\n"))  # fmt: skip
    cfg = profile.local_config("lane", 2)
    files = slurm_conf.render_slurm_files(
        cfg.name, cfg.slurm.partition, spec, cgroup_plugin="cgroup/v1", health=cfg.health
    )
    assert _check(files) == []


@pytest.mark.parametrize("plugin", ["autodetect", "cgroup/v2", "cgroup/v1"])
def test_cgroup_conf_is_accepted_under_each_plugin(plugin):
    files = slurm_conf.render_slurm_files("demo", "train", CATALOG["p5.48xlarge"], cgroup_plugin=plugin)
    cgroup = files[f"{layout.SLURM_ETC}/cgroup.conf"]
    assert T.problems("cgroup.conf", cgroup) == []
    assert f"CgroupPlugin={plugin}" in cgroup.splitlines()


def test_what_the_dlami_resolves_autodetect_to_is_a_23_11_plugin():
    # autodetect_cgroup_version() returns cgroup/v2 on a unified-only hierarchy (the
    # DLAMI's), so both the word and the plugin it picks must be in the table.
    words = T.data["values"]["cgroup.conf"]["CgroupPlugin"]["words"]
    assert "autodetect" in words and "cgroup/v2" in words
    cgroup = slurm_conf.render_slurm_files("demo", "train", CATALOG["p5.48xlarge"])[f"{layout.SLURM_ETC}/cgroup.conf"]
    keys = {k for line in cgroup.splitlines() for k, _ in T.pairs(line)[0]}
    # Settings that only mean something under cgroup/v1, or that take Slurm out of
    # systemd's delegation that cgroup/v2 relies on, are never rendered.
    assert keys.isdisjoint({"CgroupAutomount", "CgroupReleaseAgentDir", "IgnoreSystemd", "IgnoreSystemdOnFailure",
                            "CgroupMountpoint"})  # fmt: skip


def test_slurmd_unit_delegates_its_cgroup_subtree_for_cgroup_v2():
    files = slurm_conf.render_slurm_files("demo", "train", CATALOG["p5.48xlarge"])
    slurmd = files[f"{layout.SYSTEMD_DIR}/slurmd.service.d/gpu-cluster.conf"].splitlines()
    assert "Delegate=yes" in slurmd
    slurmctld = files[f"{layout.SYSTEMD_DIR}/slurmctld.service.d/gpu-cluster.conf"].splitlines()
    assert not [ln for ln in slurmctld if ln.startswith("Delegate=")]
