"""nodeside/bake.py (gpu-cluster-bake) run as step 20 runs it, against a fake image root.

The image's files (/boot, /lib/modules, the drop-ins, Pyxis, the download record) live
in a temp directory standing in for `/` (GPU_CLUSTER_IMAGE_ROOT); the package tools are
stubs on a private PATH: dpkg-query prints a package table the test writes, `enroot
version`, `uname -r` and `apt-config dump` print what the test sets, and `modinfo -F
vermagic FILE` prints the stub module file's own vermagic line. The real module
format (an ELF .modinfo section) is read by the real modinfo in the lane test
(tests/daemons/test_images_root.py).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from nodeside import bake

NODESIDE = Path(__file__).resolve().parents[2] / "nodeside"
PROGRAM = NODESIDE / "bake.py"
K = "6.8.0-1015-aws"
DEB, CAPS, PYXIS = "enroot_4.2.1-1_amd64.deb", "enroot+caps_4.2.1-1_amd64.deb", "v0.24.0.tar.gz"
AGENT, AGENT_VERSION = "amazon-cloudwatch-agent.deb", "1.300064.1b1344"
PACKAGES = {
    "slurm-wlm": "23.11.4-1.2ubuntu5",
    "slurmd": "23.11.4-1.2ubuntu5",
    "slurmctld": "23.11.4-1.2ubuntu5",
    "slurm-client": "23.11.4-1.2ubuntu5",
    "slurm-wlm-basic-plugins": "23.11.4-1.2ubuntu5",
    "libslurm40t64": "23.11.4-1.2ubuntu5",
    "libpmix2t64": "5.0.1-4.1build1",
    "libpmix-dev": "5.0.1-4.1build1",
    "munge": "0.5.15-4build1",
    "libmunge2": "0.5.15-4build1",
    "enroot": "4.2.1-1",
    "enroot+caps": "4.2.1-1",
    "lustre-client-modules-" + K: "2.15.6-1fsx8",
    "lustre-client-utils": "2.15.6-1fsx8",
    "linux-image-" + K: "6.8.0-1015.16",
    "linux-modules-" + K: "6.8.0-1015.16",
    "libc6": "2.39-0ubuntu8.3",
    "zlib1g": "1:1.3.dfsg-3.1ubuntu2",
    "amazon-cloudwatch-agent": f"{AGENT_VERSION}-1",
}
NOT_HELD = {"enroot", "enroot+caps", "libc6", "zlib1g", "amazon-cloudwatch-agent"}
STUBS = {
    "dpkg-query": 'cat "$STUB/dpkg.txt"',
    "enroot": '[[ $1 == version ]] && echo "$STUB_ENROOT"',
    "uname": '[[ $1 == -r ]] && echo "$STUB_UNAME"',
    "modinfo": '[[ $1 == -F && $2 == vermagic && -r $3 ]] && cat "$3"',
    # apt's parser reads the drop-in; the stub prints its list as `apt-config dump` does
    "apt-config": r"""grep -o '"[^"]*";' "$STUB_ROOT/etc/apt/apt.conf.d/51gpu-cluster-unattended-upgrades" |
  sed 's/^/Unattended-Upgrade::Package-Blacklist:: /'""",
}


class Image:
    def __init__(self, tmp: Path):
        self.root, self.stub = tmp / "root", tmp / "stub"
        (self.stub / "bin").mkdir(parents=True)
        for name, body in STUBS.items():
            p = self.stub / "bin" / name
            p.write_text(f"#!{shutil.which('bash')}\n{body}\n")
            p.chmod(0o755)
        for name in ("bash", "cat", "grep", "sed"):
            (self.stub / "bin" / name).symlink_to(shutil.which(name))
        self.packages = dict(PACKAGES)
        self.held = set(PACKAGES) - NOT_HELD
        self.env = {
            "PATH": str(self.stub / "bin"),
            "STUB": str(self.stub),
            "STUB_ROOT": str(self.root),
            "STUB_ENROOT": "4.2.1",
            "STUB_UNAME": K,
            "GPU_CLUSTER_IMAGE_ROOT": str(self.root),
            "SLURM_SERIES": "23.11",
            "ENROOT_VERSION": "4.2.1",
            "PYXIS_VERSION": "0.24.0",
            "DOWNLOAD_SHA256": f"{DEB}=record {CAPS}=record {PYXIS}=record {AGENT}=record",
            "CLOUDWATCH_AGENT_VERSION": AGENT_VERSION,
            "DOWNLOAD_RECORD": "/var/lib/gpu-cluster-image/downloads.sha256",
            "PYXIS_SO": "/usr/local/lib/slurm/spank_pyxis.so",
            "GPU_CLUSTER_FSX": "lustre",
            "NEEDRESTART_DROPIN": "/etc/needrestart/conf.d/90-gpu-cluster.conf",
            "UNATTENDED_UPGRADES_DROPIN": "/etc/apt/apt.conf.d/51gpu-cluster-unattended-upgrades",
            "NODE_TEMPLATES": str(NODESIDE / "conf"),
        }
        self.file("/boot/vmlinuz-" + K, "kernel")
        self.module(K)
        self.file("/etc/os-release", 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nVERSION_CODENAME=noble\n')
        self.file("/usr/local/lib/slurm/spank_pyxis.so", "so")
        self.file("/usr/local/lib/slurm/spank_pyxis.so.version", "0.24.0\n")
        self.file(self.env["NEEDRESTART_DROPIN"], (NODESIDE / "conf/needrestart.conf").read_text())
        self.file(self.env["UNATTENDED_UPGRADES_DROPIN"], (NODESIDE / "conf/unattended-upgrades.conf").read_text())
        self.file(
            self.env["DOWNLOAD_RECORD"],
            "".join(f"{'a' * 63}{i}  {f}\n" for i, f in enumerate((DEB, CAPS, PYXIS, AGENT))),
        )

    def file(self, path: str, text: str) -> Path:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return p

    def module(self, kernel: str, built_for: str | None = None, name: str = "lustre.ko") -> Path:
        return self.file(f"/lib/modules/{kernel}/updates/fs/lustre/{name}", f"{built_for or kernel} SMP mod_unload\n")

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        lines = [f"{'hi' if p in self.held else 'ii'} {p} {v}\n" for p, v in sorted(self.packages.items())]
        (self.stub / "dpkg.txt").write_text("".join(lines))
        return subprocess.run(
            [str(PROGRAM), *args], env={**self.env, **env}, capture_output=True, text=True, timeout=30
        )

    def manifest(self) -> dict:
        return json.loads((self.root / bake.MANIFEST.lstrip("/")).read_text())


@pytest.fixture
def image(tmp_path: Path) -> Image:
    return Image(tmp_path)


def refusal(r: subprocess.CompletedProcess, cmd: str) -> str:
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.startswith(f"gpu-cluster-bake {cmd}: "), r.stderr
    return r.stderr[len(f"gpu-cluster-bake {cmd}: ") :].rstrip("\n")


# --- the image's kernel and its Lustre module ---------------------------------------------


def test_the_image_kernel_is_the_newest_installed_by_version_not_by_text(image):
    for k in ("6.8.0-999-aws", "6.8.0-1009-aws"):
        image.file(f"/boot/vmlinuz-{k}", "kernel")
    image.file("/boot/config-9.9.9", "not a kernel image")
    assert image.run("kernel").stdout == f"{K}\n"


def test_a_root_without_a_kernel_has_none(image):
    shutil.rmtree(image.root / "boot")
    r = image.run("kernel")
    assert (r.returncode, r.stdout) == (0, "\n")


def test_record_refuses_an_image_whose_own_kernel_has_no_lustre_module(image):
    # The running kernel (the build instance's) has its module; the image boots a newer
    # kernel whose tree has none: a node booted from it could not mount /fsx.
    newer = "6.8.0-1016-aws"
    image.file(f"/boot/vmlinuz-{newer}", "kernel")
    (image.root / f"lib/modules/{newer}/kernel").mkdir(parents=True)
    image.packages["linux-image-" + newer] = "6.8.0-1016.17"
    reason = refusal(image.run("record"), "record")
    assert reason == (
        f"no Lustre client module for kernel {newer} (no lustre.ko under {image.root}/lib/modules/{newer}): "
        f"FSx's client repository has no lustre-client-modules-{newer} yet, or it was not installed; bake from "
        "an image whose kernel has one, or wait for FSx's client for this kernel"
    )
    assert not (image.root / bake.MANIFEST.lstrip("/")).exists()


def test_record_refuses_a_kernel_without_any_module_tree(image):
    shutil.rmtree(image.root / "lib/modules")
    reason = refusal(image.run("record"), "record")
    assert (
        reason
        == f"no module tree {image.root}/lib/modules/{K} for kernel {K}: the image's kernel has no modules installed"
    )


def test_record_refuses_a_module_built_for_another_kernel(image):
    shutil.rmtree(image.root / "lib/modules")
    image.module(K, built_for="6.8.0-1009-aws", name="lustre.ko.zst")
    reason = refusal(image.run("record"), "record")
    assert reason == (
        f"{image.root}/lib/modules/{K}/updates/fs/lustre/lustre.ko.zst was built for kernel '6.8.0-1009-aws', "
        f"not {K} (modinfo -F vermagic): it would not load; install lustre-client-modules-{K}"
    )


def test_lustre_module_names_the_module_it_found(image):
    r = image.run("lustre-module", K)
    assert (r.returncode, r.stdout) == (0, f"/lib/modules/{K}/updates/fs/lustre/lustre.ko\n")


# --- record: every pin checked, then the manifest -----------------------------------------


def test_record_writes_the_manifest_and_its_sha256(image):
    r = image.run("record")
    assert r.returncode == 0, r.stderr
    data = (image.root / bake.MANIFEST.lstrip("/")).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    assert r.stdout == f"image manifest {bake.MANIFEST} sha256 {digest}\n"
    assert (image.root / (bake.MANIFEST + ".sha256").lstrip("/")).read_text() == f"{digest}  manifest.json\n"
    m = json.loads(data)
    assert m["kernel"] == K and m["os"] == "Ubuntu 24.04.1 LTS" and m["format"] == 1
    assert m["versions"] == {
        "kernel": K,
        "slurm": "23.11.4-1.2ubuntu5",
        "munge": "0.5.15-4build1",
        "pmix": "5.0.1-4.1build1",
        "enroot": "4.2.1",
        "pyxis": "0.24.0",
        "lustre": "2.15.6-1fsx8",
        "cwagent": AGENT_VERSION,
    }
    assert m["lustre"] == {
        "kernel": K,
        "module": f"/lib/modules/{K}/updates/fs/lustre/lustre.ko",
        "vermagic": f"{K} SMP mod_unload",
        "utils": "2.15.6-1fsx8",
    }
    assert m["held"] == sorted(set(PACKAGES) - NOT_HELD)
    assert m["packages"] == {p: v for p, v in PACKAGES.items() if p not in ("libc6", "zlib1g")}
    assert m["downloads"] == {DEB: "a" * 63 + "0", CAPS: "a" * 63 + "1", PYXIS: "a" * 63 + "2", AGENT: "a" * 63 + "3"}
    assert m["pins"]["ENROOT_VERSION"] == "4.2.1" and m["pins"]["SLURM_SERIES"] == "23.11"
    assert set(m["dropins"]) == {image.env["NEEDRESTART_DROPIN"], image.env["UNATTENDED_UPGRADES_DROPIN"]}
    assert data == bake.manifest_bytes(m)  # sorted, byte-stable


def test_record_on_a_lane_root_skips_lustre_with_the_lanes_reason(image):
    shutil.rmtree(image.root / "boot")
    for p in [p for p in image.packages if "lustre" in p or p.startswith("linux-")]:
        del image.packages[p]
    assert image.run("record", GPU_CLUSTER_FSX="bind").returncode == 0
    m = image.manifest()
    assert m["kernel"] is None and m["versions"]["kernel"] == "none" and m["versions"]["lustre"] == "none"
    assert m["lustre"] == {"skipped": "GPU_CLUSTER_FSX=bind: /fsx is a bind mount, not Lustre (docs/node-contract.md)"}


def test_record_checks_the_cloudwatch_agent_and_a_lane_records_it_as_skipped(image):
    image.packages["amazon-cloudwatch-agent"] = "1.300063.0b1323-1"
    assert refusal(image.run("record"), "record") == (
        "amazon-cloudwatch-agent is '1.300063.0b1323-1', need 1.300064.1b1344: the bake must install the pinned agent"
    )
    del image.packages["amazon-cloudwatch-agent"]
    reason = "the local lanes have no route to Amazon's CloudWatch agent downloads or to CloudWatch"
    downloads = f"{DEB}=record {CAPS}=record {PYXIS}=record"
    assert image.run("record", CLOUDWATCH_SKIP=reason, DOWNLOAD_SHA256=downloads).returncode == 0
    m = image.manifest()
    assert m["versions"]["cwagent"] == "skipped" and "amazon-cloudwatch-agent" not in m["packages"]
    assert m["pins"]["CLOUDWATCH_SKIP"] == reason
    # a node of that root in a lane verifies; the same root refused where the agent is pinned
    assert image.run("verify", CLOUDWATCH_SKIP=reason, DOWNLOAD_SHA256=downloads).returncode == 0
    assert refusal(image.run("verify", DOWNLOAD_SHA256=downloads), "verify").startswith(
        "this image was baked for other pins (CloudWatch agent skipped is not the pinned 1.300064.1b1344)"
    )


def test_record_without_a_kernel_refuses_a_lustre_image(image):
    shutil.rmtree(image.root / "boot")
    reason = refusal(image.run("record"), "record")
    assert reason.startswith("none: the image has no kernel of its own")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"slurmd": "22.05.8-4"}, "slurmd is '22.05.8-4', need Slurm 23.11: the bake must install the pinned series"),
        ({"libpmix2t64": None}, "libpmix2 is not installed: srun --mpi=pmix cannot load the PMIx library"),
        ({"munge": None}, "munge is not installed"),
        (
            {"lustre-client-utils": None},
            "lustre-client-utils is not installed: mount.lustre is missing, /fsx would not mount",
        ),
    ],
)
def test_record_checks_every_pinned_package(image, change, reason):
    for p, v in change.items():
        if v is None:
            del image.packages[p]
        else:
            image.packages[p] = v
    assert refusal(image.run("record"), "record") == reason


def test_record_checks_enroot_and_pyxis_exactly(image):
    assert refusal(image.run("record", STUB_ENROOT="4.1.2"), "record") == "enroot version is '4.1.2', need 4.2.1"
    image.file("/usr/local/lib/slurm/spank_pyxis.so.version", "0.23.0\n")
    assert (
        refusal(image.run("record"), "record")
        == "Pyxis at /usr/local/lib/slurm/spank_pyxis.so is '0.23.0', need 0.24.0"
    )


def test_record_refuses_packages_that_are_not_held(image):
    image.held -= {"slurmd", "linux-image-" + K}
    assert refusal(image.run("record"), "record") == (
        f"not held after step 20: linux-image-{K} slurmd (apt-mark hold): an upgrade could change them"
    )


def test_record_refuses_a_changed_dropin_and_one_apt_does_not_read(image):
    image.file(image.env["NEEDRESTART_DROPIN"], "# edited\n")
    assert refusal(image.run("record"), "record") == (
        "/etc/needrestart/conf.d/90-gpu-cluster.conf is not the shipped needrestart.conf: step 20 installs it"
    )


def test_record_needs_a_recorded_digest_for_a_record_pin(image):
    image.file(image.env["DOWNLOAD_RECORD"], "")
    assert refusal(image.run("record"), "record") == (
        f"{DEB} is pinned `record` but the bake recorded no digest for it in $DOWNLOAD_RECORD"
    )


def test_a_pinned_digest_is_what_the_manifest_records(image):
    pins = f"{DEB}={'1' * 64} {CAPS}={'2' * 64} {PYXIS}=record"
    assert image.run("record", DOWNLOAD_SHA256=pins).returncode == 0
    assert image.manifest()["downloads"] == {DEB: "1" * 64, CAPS: "2" * 64, PYXIS: "a" * 63 + "2"}


# --- verify: a node booting from the baked image ------------------------------------------


def baked(image: Image) -> str:
    r = image.run("record")
    assert r.returncode == 0, r.stderr
    return r.stdout.split()[-1]


def test_verify_accepts_the_image_as_baked_and_prints_what_the_node_booted(image):
    digest = baked(image)
    r = image.run("verify")
    assert (r.returncode, r.stdout) == (0, f"NODE_IMAGE_MANIFEST={digest}\nNODE_KERNEL={K}\n")


def test_verify_on_a_lane_root_says_why_lustre_is_not_checked(image):
    shutil.rmtree(image.root / "boot")
    assert image.run("record", GPU_CLUSTER_FSX="bind").returncode == 0
    r = image.run("verify", GPU_CLUSTER_FSX="bind", STUB_UNAME="6.1.0-host")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == [
        "NODE_KERNEL=none",
        "# Lustre client: GPU_CLUSTER_FSX=bind: /fsx is a bind mount, not Lustre (docs/node-contract.md)",
    ]


@pytest.mark.parametrize(
    ("env", "mutate", "reason"),
    [
        (
            {},
            lambda i: i.packages.update(slurmd="23.11.4-1.2ubuntu6"),
            "slurmd is 23.11.4-1.2ubuntu6, the image was baked with 23.11.4-1.2ubuntu5",
        ),
        ({}, lambda i: i.held.discard("munge"), "munge is no longer held (apt-mark hold), as the image was baked"),
        (
            {"STUB_UNAME": "6.8.0-1016-aws"},
            None,
            f"running kernel 6.8.0-1016-aws, the image was baked for {K} (its Lustre module): a kernel changed after "
            "the bake; boot the baked kernel or bake a new image",
        ),
        ({"STUB_ENROOT": "4.1.2"}, None, "enroot version is '4.1.2', the image was baked with 4.2.1"),
        (
            {},
            lambda i: i.file(i.env["UNATTENDED_UPGRADES_DROPIN"], "//\n"),
            "/etc/apt/apt.conf.d/51gpu-cluster-unattended-upgrades differs from the baked image's",
        ),
        (
            {"ENROOT_VERSION": "4.2.2", "DOWNLOAD_SHA256": "enroot_4.2.2-1_amd64.deb=record"},
            None,
            "this image was baked for other pins (Enroot 4.2.1 is not the pinned 4.2.2; "
            "enroot_4.2.2-1_amd64.deb was not downloaded by the bake (pinned record)): bake a new image (python3 -m ops bake) and "
            "pin it, or pin the image baked for these pins",
        ),
    ],
)
def test_verify_refuses_what_differs_from_the_bake(image, env, mutate, reason):
    baked(image)
    if mutate:
        mutate(image)
    assert refusal(image.run("verify", **env), "verify") == reason


def test_verify_refuses_a_manifest_that_does_not_match_its_sha256(image):
    digest = baked(image)
    path = image.root / bake.MANIFEST.lstrip("/")
    path.write_text(path.read_text().replace('"munge": "0.5.15-4build1"', '"munge": "0.5.16"'))
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    assert refusal(image.run("verify"), "verify") == (
        f"{bake.MANIFEST} has sha256 {got}, {bake.MANIFEST}.sha256 says {digest}"
    )


def test_clean_removes_the_bakes_node_state_and_logs_only(image):
    for d in ("/var/lib/gpu-cluster/status", "/var/log/gpu-cluster/boot.log"):
        image.file(d, "x")
    baked(image)
    assert image.run("clean").returncode == 0
    assert not (image.root / "var/lib/gpu-cluster").exists() and not (image.root / "var/log/gpu-cluster").exists()
    assert (image.root / bake.MANIFEST.lstrip("/")).exists()


def test_result_is_one_line_with_the_manifest_and_its_sha256(image):
    digest = baked(image)
    line = image.run("result").stdout
    assert line.count("\n") == 1 and line.startswith(bake.RESULT_MARK + " ")
    doc = json.loads(line.split(" ", 1)[1])
    assert doc["manifest_sha256"] == digest and doc["manifest"] == image.manifest()


def test_usage_is_exit_2(image):
    assert image.run("bake").returncode == 2
    assert image.run("lustre-module").returncode == 2


# --- the one pin rule, on the manifest and on the AMI's tags ------------------------------


def test_pin_rule_reads_the_same_from_the_manifest_and_from_the_image_tags(image):
    digest = baked(image)
    m = image.manifest()
    tags = bake.image_tags(m, digest)
    back = bake.recorded_from_tags(tags)
    assert back["manifest_sha256"] == digest
    pins = {
        "SLURM_SERIES": "23.11",
        "ENROOT_VERSION": "4.2.1",
        "PYXIS_VERSION": "0.24.0",
        "DOWNLOAD_SHA256": f"{DEB}={'a' * 63}0 {CAPS}=record {PYXIS}=record",
    }
    assert bake.pin_problems(m, pins) == bake.pin_problems(back, pins) == []
    pins = {
        **pins,
        "SLURM_SERIES": "24.11",
        "PYXIS_VERSION": "0.25.0",
        "DOWNLOAD_SHA256": f"{DEB}={'b' * 64}",
        "CLOUDWATCH_AGENT_VERSION": "1.300068.0b1491",
    }
    expected = [
        "Slurm 23.11.4-1.2ubuntu5 is not of the pinned series 24.11",
        "Pyxis 0.24.0 is not the pinned 0.25.0",
        "CloudWatch agent 1.300064.1b1344 is not the pinned 1.300068.0b1491",
        f"{DEB} baked with sha256 {'a' * 63}0, pinned {'b' * 64}",
    ]
    assert bake.pin_problems(m, pins) == bake.pin_problems(back, pins) == expected


def test_image_tags_are_the_key_versions_the_digest_and_each_download(image):
    digest = baked(image)
    tags = bake.image_tags(image.manifest(), digest)
    assert {k: v for k, v in tags.items() if k != "GpuClusterImageBaked"} == {
        "GpuClusterImageManifest": digest,
        "GpuClusterImageKernel": K,
        "GpuClusterImageSlurm": "23.11.4-1.2ubuntu5",
        "GpuClusterImageEnroot": "4.2.1",
        "GpuClusterImagePyxis": "0.24.0",
        "GpuClusterImageLustre": "2.15.6-1fsx8",
        "GpuClusterImageMunge": "0.5.15-4build1",
        "GpuClusterImagePmix": "5.0.1-4.1build1",
        f"GpuClusterDownload:{DEB}": "a" * 63 + "0",
        f"GpuClusterDownload:{CAPS}": "a" * 63 + "1",
        f"GpuClusterDownload:{PYXIS}": "a" * 63 + "2",
        f"GpuClusterDownload:{AGENT}": "a" * 63 + "3",
        "GpuClusterImageCwagent": AGENT_VERSION,
    }
    assert bake.recorded_from_tags({"Name": "plain DLAMI"}) is None


def test_an_overlong_tag_value_is_refused_by_name(image):
    digest = baked(image)
    m = image.manifest()
    m["versions"]["slurm"] = "9" * 257
    with pytest.raises(bake.BakeError, match="image tag GpuClusterImageSlurm=9{40}...: longer than AWS's 128/256"):
        bake.image_tags(m, digest)


def test_manifest_path_is_the_layouts():
    from userdata import layout

    assert bake.MANIFEST == layout.IMAGE_MANIFEST


def test_must_hold_covers_what_step_20_holds():
    # step 20's HOLD_PATTERNS (bash) hold at least what the bake requires to be held.
    step = (NODESIDE / "steps/20-packages.sh").read_text()
    for pat in bake.MUST_HOLD:
        assert f"'{pat}'" in step, pat
