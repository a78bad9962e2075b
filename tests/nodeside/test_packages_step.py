"""Step 20 (packages) run for real against stub package tools.

The step is sourced in bash (its functions, not main) with a PATH that holds only
stubs for apt-get, apt-cache, dpkg-query, dpkg, modinfo, uname, gpg and the munge
binaries, plus the few real core utilities it needs. The stubs record every apt
command line and "install" packages into a state directory, so the tests assert the
exact commands the step runs and what it concludes from the result.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.processes import command_lines

BOOT = Path(__file__).resolve().parents[2] / "nodeside"
STEP = BOOT / "steps" / "20-packages.sh"
KERNEL = "6.8.0-1015-aws"
APT = "apt-get -o DPkg::Lock::Timeout=600 -y"
KEEP_OURS = "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold"
CORE = (
    "bash",
    "cat",
    "date",
    "sed",
    "grep",
    "mktemp",
    "rm",
    "basename",
    "dirname",
    "tee",
    "mkdir",
    "tar",
    "gzip",
    "curl",
    "printf",
    "env",
    "chmod",
    "sha256sum",
    "awk",
    "mv",
    "install",
)
MAIN_DEB, CAPS_DEB = b"main deb", b"caps deb"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


PINS = f"enroot_4.1.2-1_amd64.deb={sha(MAIN_DEB)} enroot+caps_4.1.2-1_amd64.deb={sha(CAPS_DEB)}"

STUBS = {
    # Every call is logged as "<DEBIAN_FRONTEND>|<args>"; `install` marks packages
    # installed (versions from STUB_VERSION_<pkg>, default 9.9-1) and, for the Lustre
    # packages, provides what they really provide.
    "apt-get": r"""
printf '%s|%s\n' "${DEBIAN_FRONTEND:-}" "$*" >>"$STUB/apt.log"
[[ " $* " == *" ${STUB_APT_FAILS:-none} "* ]] && exit 100
if [[ " $* " == *" update "* && -e $STUB/state/lists-locked ]]; then
  # apt 2.7.14's words when apt-daily holds the lists lock (DPkg::Lock::Timeout does not wait)
  echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2
  echo "E: Unable to lock directory /var/lib/apt/lists/" >&2
  exit 100
fi
inst=0
for a; do
  if [[ $a == install ]]; then inst=1; continue; fi
  ((inst)) && [[ $a != -* ]] || continue
  name=${a##*/}
  case $name in
    *.deb) name=${name%.deb}; [[ $name == enroot ]] && printf '#!/bin/sh\necho %s\n' "$STUB_ENROOT_REPORTS" >"$STUB/bin/enroot" && chmod +x "$STUB/bin/enroot" ;;
  esac
  var=STUB_VERSION_${name//[-+.]/_}
  echo "${!var:-9.9-1}" >"$STUB/state/$name"
  case $name in
    lustre-client-modules-*)  # the module, in its kernel's tree, built for that kernel
      k=${name#lustre-client-modules-}; mkdir -p "$STUB_ROOT/lib/modules/$k/updates/fs/lustre"
      echo "$k SMP mod_unload modversions" >"$STUB_ROOT/lib/modules/$k/updates/fs/lustre/lustre.ko" ;;
    lustre-client-utils) [[ -n ${STUB_UTILS_BROKEN:-} ]] || { printf '#!/bin/sh\n' >"$STUB/bin/mount.lustre"; chmod +x "$STUB/bin/mount.lustre"; } ;;
    munge) for b in munged mungekey munge unmunge; do printf '#!/bin/sh\n' >"$STUB/bin/$b"; chmod +x "$STUB/bin/$b"; done ;;
  esac
done
""",
    "apt-cache": r"""
[[ $1 == policy ]] || exit 2
if [[ -e $STUB/state/nocandidate-$2 ]]; then echo "  Candidate: (none)"; else echo "  Candidate: 9.9-1"; fi
""",
    "dpkg-query": r"""
if [[ $2 == '-f=${db:Status-Abbrev} ${Package}\n' ]]; then  # patterns: list what matches
  shift 2; rc=1
  for pat; do for f in "$STUB"/state/$pat; do
    [[ -e $f && ${f##*/} != held-* ]] || continue
    if [[ -e $STUB/state/held-${f##*/} ]]; then printf 'hi  %s\n' "${f##*/}"; else printf 'ii  %s\n' "${f##*/}"; fi; rc=0
  done; done
  exit $rc
fi
pkg=${*: -1}
[[ -e $STUB/state/$pkg ]] || exit 1
if [[ -e $STUB/state/held-$pkg ]]; then printf 'hi %s' "$(<"$STUB/state/$pkg")"; else printf 'ii %s' "$(<"$STUB/state/$pkg")"; fi
""",
    "dpkg": r"""[[ $1 == --print-architecture ]] && echo amd64""",
    # `modinfo -F vermagic FILE`: a stub module file holds its vermagic line
    "modinfo": r"""[[ $1 == -F && $2 == vermagic && -r $3 ]] && cat "$3" """,
    "uname": f"""[[ $1 == -r ]] && echo {KERNEL}""",
    "gpg": r"""cat >/dev/null; echo dearmored""",
    # the step's only waits: recorded, never slept; STUB_LOCK_FREED_AFTER frees the lists
    # lock after that many retries (the apt-get stub then succeeds)
    "sleep": r"""echo "$1" >>"$STUB/sleeps"
n=$(grep -c . "$STUB/sleeps")
((n >= ${STUB_LOCK_FREED_AFTER:-999})) && rm -f "$STUB/state/lists-locked"
exit 0""",
    "apt-mark": r"""echo "$*" >>"$STUB/apt-mark.log"
""",
    "openssl": "",
}


class Box:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.root = tmp / "root"  # the image's files (GPU_CLUSTER_IMAGE_ROOT): /boot, /lib/modules
        self.stub = tmp / "stub"
        self.bin = self.stub / "bin"
        self.state = self.stub / "state"
        for d in (self.bin, self.state, tmp / "sources", tmp / "keyrings", self.root, tmp / "node-state"):
            d.mkdir(parents=True)
        for name, body in STUBS.items():
            self.add_stub(name, body)
        for name in CORE:
            real = shutil.which(name)
            assert real, f"{name} is needed on the test machine"
            (self.bin / name).symlink_to(real)
        (tmp / "apt.log").touch()
        self.reason = tmp / "reason"
        self.notes = tmp / "notes"

    def add_stub(self, name: str, body: str) -> None:
        p = self.bin / name
        p.write_text(f"#!{shutil.which('bash')}\nset -u\n{body}\n")
        p.chmod(0o755)

    def module(self, kernel: str = KERNEL, built_for: str | None = None) -> Path:
        """A Lustre module in `kernel`'s tree (built for `built_for`, default that kernel)."""
        d = self.root / "lib/modules" / kernel / "updates/fs/lustre"
        d.mkdir(parents=True, exist_ok=True)
        (d / "lustre.ko").write_text(f"{built_for or kernel} SMP mod_unload modversions\n")
        return d / "lustre.ko"

    def remove(self, name: str) -> None:
        (self.bin / name).unlink()

    def installed(self, pkg: str, version: str = "9.9-1") -> None:
        (self.state / pkg).write_text(version + "\n")

    def run(self, func: str, **env: str) -> subprocess.CompletedProcess:
        base = {
            "PATH": str(self.bin),
            "STUB": str(self.stub),
            "STUB_ROOT": str(self.root),
            "GPU_CLUSTER_IMAGE_ROOT": str(self.root),
            "BAKE_PROGRAM": str(BOOT / "bake.py"),
            "GPU_CLUSTER_STATE": str(self.tmp / "node-state"),
            "IMAGE_MANIFEST": "/var/lib/gpu-cluster-image/manifest.json",
            "HOME": str(self.tmp),
            "TMPDIR": str(self.tmp),
            "GPU_CLUSTER_HOME": str(BOOT),
            "GC_STEP": "20-packages",
            "GC_REASON_FILE": str(self.reason),
            "GC_NOTES_FILE": str(self.notes),
            "APT_SOURCES_DIR": str(self.tmp / "sources"),
            "APT_KEYRINGS_DIR": str(self.tmp / "keyrings"),
            "FSX_CLIENT_KEY_URL": f"file://{self.tmp}/fsx.asc",
            "FSX_CLIENT_REPO": "https://fsx.example/ubuntu",
            "ENROOT_VERSION": "4.1.2",
            "PYXIS_VERSION": "0.24.0",
            "ENROOT_URL": f"file://{self.tmp}/mirror/enroot",
            "STUB_ENROOT_REPORTS": "4.1.2",
            "GPU_CLUSTER_PACKAGES": "install",
            "DOWNLOAD_SHA256": PINS,
            "DOWNLOAD_RECORD": str(self.tmp / "state" / "downloads.sha256"),
            "NODE_TEMPLATES": str(BOOT / "conf"),
            "NEEDRESTART_DROPIN": str(self.tmp / "etc/needrestart/conf.d/90-gpu-cluster.conf"),
            "UNATTENDED_UPGRADES_DROPIN": str(self.tmp / "etc/apt/apt.conf.d/51gpu-cluster-unattended-upgrades"),
        }
        (self.tmp / "fsx.asc").write_text("key\n")
        base.update(env)
        script = f'set -euo pipefail; . "{STEP}"; {func}'
        return subprocess.run(
            [shutil.which("bash"), "-c", script], env=base, capture_output=True, text=True, timeout=60
        )

    def apt(self) -> list[str]:
        path = self.stub / "apt.log"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path)


def codename() -> str:
    return re.search(r"^VERSION_CODENAME=\"?(\w+)", Path("/etc/os-release").read_text(), re.M).group(1)


def install_line(*pkgs: str) -> str:
    return f"noninteractive|-o DPkg::Lock::Timeout=600 -y {KEEP_OURS} install --no-install-recommends {' '.join(pkgs)}"


UPDATE = "|-o DPkg::Lock::Timeout=600 -y update"


# --- (b) Lustre: the module AND lustre-client-utils (mount.lustre) ----------------------


def test_lustre_installs_the_module_and_the_mount_helper(box):
    r = box.run("lustre")
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.apt() == [UPDATE, install_line(f"lustre-client-modules-{KERNEL}", "lustre-client-utils")]
    assert (box.tmp / "sources" / "fsxlustreclientrepo.list").read_text() == (
        f"deb [signed-by={box.tmp}/keyrings/fsx-ubuntu-public-key.gpg] https://fsx.example/ubuntu {codename()} main\n"
    )
    assert f"Lustre client for {KERNEL} ({box.bin}/mount.lustre)" in r.stdout


def test_lustre_module_present_but_no_mount_helper_installs_only_the_utils(box):
    box.installed(f"lustre-client-modules-{KERNEL}")
    box.module()
    r = box.run("lustre")
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.apt() == [UPDATE, install_line("lustre-client-utils")]


def test_lustre_fails_with_reason_when_mount_lustre_is_still_missing(box):
    r = box.run("lustre", STUB_UTILS_BROKEN="1")
    assert r.returncode == 1
    assert box.reason.read_text() == "mount.lustre not found (package lustre-client-utils): the /fsx mount would fail\n"


def test_lustre_already_complete_runs_no_apt(box):
    box.installed(f"lustre-client-modules-{KERNEL}")
    box.module()
    box.add_stub("mount.lustre", "")
    r = box.run("lustre")
    assert r.returncode == 0, r.stderr
    assert box.apt() == []


def test_lustre_without_a_candidate_names_the_package(box):
    (box.state / "nocandidate-lustre-client-utils").touch()
    r = box.run("lustre")
    assert r.returncode == 1
    assert box.reason.read_text().startswith(f"no lustre-client-utils for the running kernel {KERNEL} ")
    assert box.apt() == [UPDATE]  # the repository's index, never an install


def test_fsx_bind_reports_lustre_skipped_and_installs_nothing(box):
    r = box.run("lustre", GPU_CLUSTER_FSX="bind")
    assert r.returncode == 0, r.stderr
    assert box.apt() == []
    assert box.notes.read_text() == (
        "20-packages: skipped: Lustre client (GPU_CLUSTER_FSX=bind: /fsx is a bind mount, not Lustre)\n"
    )


def test_fsx_setting_is_validated(box):
    r = box.run("main", GPU_CLUSTER_FSX="nfs")
    assert r.returncode == 1
    assert box.reason.read_text() == "GPU_CLUSTER_FSX must be lustre or bind, not 'nfs'\n"


# --- (c) the step checks its own tools and names what is missing ------------------------


def test_missing_modinfo_is_named_with_its_package(box):
    box.remove("modinfo")
    r = box.run("lustre")
    assert r.returncode == 1
    assert box.reason.read_text() == "step 20 needs tools that are not on PATH: modinfo (package kmod)\n"
    assert box.apt() == []


def test_missing_package_tools_are_named_before_any_install(box):
    box.remove("apt-get")
    box.remove("dpkg-query")
    r = box.run("main")
    assert r.returncode == 1
    assert box.reason.read_text() == (
        "step 20 needs tools that are not on PATH: apt-get (package apt) dpkg-query (package dpkg)\n"
    )


def test_missing_curl_is_named(box):
    box.remove("curl")
    r = box.run("main")
    assert r.returncode == 1
    assert box.reason.read_text() == "step 20 needs tools that are not on PATH: curl (package curl)\n"


def test_missing_gpg_is_named_when_the_fsx_repository_is_needed(box):
    box.remove("gpg")
    r = box.run("lustre")
    assert r.returncode == 1
    assert box.reason.read_text() == "step 20 needs tools that are not on PATH: gpg (package gnupg)\n"


# --- (a) apt never asks about our conffiles ---------------------------------------------


def test_munge_install_keeps_our_conffiles_without_a_terminal(box):
    r = box.run("munge_pkg")
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.apt() == [UPDATE, install_line("munge")]


# --- Enroot from a mirror laid out like the upstream releases ---------------------------


def make_mirror(box: Box, version: str) -> None:
    d = box.tmp / "mirror" / "enroot" / f"v{version}"
    d.mkdir(parents=True)
    (d / f"enroot_{version}-1_amd64.deb").write_bytes(MAIN_DEB)
    (d / f"enroot+caps_{version}-1_amd64.deb").write_bytes(CAPS_DEB)


def test_enroot_downloads_both_release_debs_from_enroot_url(box):
    make_mirror(box, "4.1.2")
    r = box.run("enroot")
    assert r.returncode == 0, r.stdout + r.stderr
    update, install = box.apt()
    assert update == UPDATE
    m = re.fullmatch(re.escape(install_line("")).rstrip() + r" (\S+)/enroot\.deb (\S+)/enroot-caps\.deb", install)
    assert m and m.group(1) == m.group(2), install
    assert "Enroot 4.1.2" in r.stdout


def test_enroot_version_is_still_checked_exactly(box):
    make_mirror(box, "4.1.2")
    r = box.run("enroot", STUB_ENROOT_REPORTS="4.1.1")
    assert r.returncode == 1
    assert box.reason.read_text() == "enroot version is '4.1.1', need 4.1.2\n"


def test_enroot_missing_from_the_mirror_names_the_url(box):
    r = box.run("enroot")
    assert r.returncode == 1
    assert box.reason.read_text() == (
        f"cannot download file://{box.tmp}/mirror/enroot/v4.1.2/enroot_4.1.2-1_amd64.deb\n"
    )
    assert box.apt() == []


def test_sourcing_the_step_runs_nothing(box):
    r = box.run("true")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and box.apt() == []


def test_stub_path_has_no_real_package_tools(box):
    # The fake PATH really hides the host's tools (otherwise the tests above prove nothing).
    r = box.run("command -v modinfo apt-get; command -v kmod || echo none")
    assert r.stdout.splitlines() == [str(box.bin / "modinfo"), str(box.bin / "apt-get"), "none"]


# --- Slurm from the OS archive, on an image that has never seen it ----------------------

SLURM_PKGS = ("slurm-wlm", "slurmd", "slurmctld", "slurmdbd", "slurm-client", "libpmix-dev")
PMIX_PLUGIN = sorted(Path("/usr/lib").glob("*/slurm-wlm/mpi_pmix*.so"))


def slurm_versions(v: str) -> dict[str, str]:
    return {f"STUB_VERSION_{p.replace('-', '_')}": v for p in SLURM_PKGS}


@pytest.mark.skipif(not PMIX_PLUGIN, reason="the step checks for Slurm's PMIx plugin on this machine")
def test_slurm_installs_the_series_on_a_fresh_image(box):
    # dpkg-query fails for never-seen packages: the step must not die on that.
    r = box.run("slurm", SLURM_SERIES="22.05", **slurm_versions("22.05.8-4+deb12u3"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.apt() == [UPDATE, install_line(*SLURM_PKGS)]
    assert "Slurm 22.05.8-4+deb12u3 with PMIx plugin" in r.stdout


def test_slurm_series_is_checked_exactly(box):
    r = box.run("slurm", SLURM_SERIES="22.05", **slurm_versions("23.11.4-1.2"))
    assert r.returncode == 1
    assert box.reason.read_text() == ("slurmd is '23.11.4-1.2', need Slurm 22.05 (SLURM_SERIES, from the OS archive)\n")


def test_failed_apt_install_is_the_step_reason(box):
    r = box.run("munge_pkg", STUB_APT_FAILS="install")
    assert r.returncode == 1
    assert box.reason.read_text() == ("apt-get install munge failed with status 100 (output above, in the boot log)\n")


def test_failed_apt_update_is_the_step_reason(box):
    r = box.run("munge_pkg", STUB_APT_FAILS="update")
    assert r.returncode == 1
    assert box.reason.read_text() == "apt-get update failed with status 100 (output above, in the boot log)\n"
    assert box.apt() == [UPDATE]


# --- every download is checked against its sha256 pin (model/pins.py) -------------------

ENROOT_MAIN_URL = "mirror/enroot/v4.1.2/enroot_4.1.2-1_amd64.deb"


def test_enroot_download_with_a_wrong_digest_stops_the_step_before_installing(box):
    make_mirror(box, "4.1.2")
    wrong = "0" * 64
    r = box.run("enroot", DOWNLOAD_SHA256=PINS.replace(sha(MAIN_DEB), wrong))
    assert r.returncode == 1
    assert box.reason.read_text() == (
        f"sha256 mismatch for enroot_4.1.2-1_amd64.deb from file://{box.tmp}/{ENROOT_MAIN_URL}: "
        f"expected {wrong}, got {sha(MAIN_DEB)}\n"
    )
    assert box.apt() == []  # nothing was installed from the file


def test_enroot_downloads_that_match_their_pins_are_logged(box):
    make_mirror(box, "4.1.2")
    r = box.run("enroot")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"enroot+caps_4.1.2-1_amd64.deb sha256 {sha(CAPS_DEB)} matches its pin" in r.stdout


def test_pyxis_source_with_a_wrong_digest_stops_the_step_before_building(box):
    src = box.tmp / "mirror" / "pyxis"
    src.mkdir(parents=True)
    (src / "v0.24.0.tar.gz").write_bytes(b"not the release")
    r = box.run(
        "pyxis",
        PYXIS_VERSION="0.24.0",
        PYXIS_URL=f"file://{src}",
        PYXIS_SO=str(box.tmp / "lib/spank_pyxis.so"),
        DOWNLOAD_SHA256=f"v0.24.0.tar.gz={'a' * 64}",
    )
    assert r.returncode == 1
    assert box.reason.read_text() == (
        f"sha256 mismatch for v0.24.0.tar.gz from file://{src}/v0.24.0.tar.gz: "
        f"expected {'a' * 64}, got {sha(b'not the release')}\n"
    )
    assert not (box.tmp / "lib/spank_pyxis.so").exists()


def test_a_download_without_a_pin_is_refused(box):
    make_mirror(box, "4.1.2")
    r = box.run("enroot", DOWNLOAD_SHA256=f"v0.24.0.tar.gz={'a' * 64}")
    assert r.returncode == 1
    assert box.reason.read_text() == (
        f"no sha256 pin for enroot_4.1.2-1_amd64.deb in DOWNLOAD_SHA256 (model/pins.py pins: v0.24.0.tar.gz={'a' * 64})\n"
    )


def test_unpinned_downloads_are_recorded_and_a_changed_file_is_refused(box):
    make_mirror(box, "4.1.2")
    record = box.tmp / "state" / "downloads.sha256"
    unpinned = "enroot_4.1.2-1_amd64.deb=record enroot+caps_4.1.2-1_amd64.deb=record"
    first = box.run("enroot", DOWNLOAD_SHA256=unpinned)
    assert first.returncode == 0, first.stdout + first.stderr
    assert record.read_text() == (
        f"{sha(MAIN_DEB)}  enroot_4.1.2-1_amd64.deb\n{sha(CAPS_DEB)}  enroot+caps_4.1.2-1_amd64.deb\n"
    )
    assert "enroot_4.1.2-1_amd64.deb is not pinned (no published digest)" in first.stdout
    # `sha256sum -c` reads the record as it is (the bake's manifest carries it)
    ok = subprocess.run(["sha256sum", "-c", str(record)], cwd=box.tmp / "mirror/enroot/v4.1.2", capture_output=True)
    assert ok.returncode == 0, ok.stdout
    # the same root installs again (a re-run, a later bake from this image): a changed file stops it
    (box.tmp / ENROOT_MAIN_URL).write_bytes(b"tampered")
    (box.bin / "enroot").unlink()  # as if Enroot were not installed yet
    again = box.run("enroot", DOWNLOAD_SHA256=unpinned)
    assert again.returncode == 1
    assert box.reason.read_text() == (
        f"sha256 mismatch for enroot_4.1.2-1_amd64.deb from file://{box.tmp}/{ENROOT_MAIN_URL}: "
        f"expected {sha(MAIN_DEB)} (recorded in {record}), got {sha(b'tampered')}\n"
    )


def test_product_pins_name_every_file_step_20_downloads():
    from model import pins

    words = dict(w.split("=") for w in pins.PRODUCT.cluster_env().split())
    v, p = pins.PRODUCT.enroot_version, pins.PRODUCT.pyxis_version
    assert set(words) == {
        f"enroot_{v}-1_amd64.deb",
        f"enroot+caps_{v}-1_amd64.deb",
        f"v{p}.tar.gz",
        "amazon-cloudwatch-agent.deb",  # step 20's cloudwatch_agent, at a versioned path
    }
    assert pins.CLOUDWATCH_AGENT.url == (
        f"https://amazoncloudwatch-agent.s3.amazonaws.com/ubuntu/amd64/{pins.CLOUDWATCH_AGENT_VERSION}/amazon-cloudwatch-agent.deb"
    )
    assert all(d == pins.RECORD or re.fullmatch(r"[0-9a-f]{64}", d) for d in words.values())
    for d in pins.PRODUCT.downloads:
        assert d.url.endswith("/" + d.file) and d.source


# --- apt-get update waits for the lists lock (DPkg::Lock::Timeout does not) -------------


def test_update_retries_while_apt_daily_holds_the_lists_lock(box):
    (box.state / "lists-locked").touch()
    r = box.run("munge_pkg", STUB_LOCK_FREED_AFTER="3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.apt() == [UPDATE] * 4 + [install_line("munge")]
    assert (box.stub / "sleeps").read_text() == "5\n5\n5\n"
    assert "apt lists lock held (apt-daily?): retrying apt-get update in 5s" in r.stdout


def test_update_gives_up_on_a_lists_lock_held_too_long(box):
    (box.state / "lists-locked").touch()
    r = box.run("munge_pkg", APT_LISTS_LOCK_WAIT="20")
    assert r.returncode == 1
    assert box.reason.read_text() == (
        "apt-get update: the apt lists lock (/var/lib/apt/lists/lock) was still held after 20s: "
        "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)\n"
    )
    assert len(box.apt()) == 5 and (box.stub / "sleeps").read_text() == "5\n" * 4


# --- what keeps a running cluster as installed -----------------------------------------


def test_hold_and_quiet_holds_kernel_lustre_slurm_munge_and_installs_the_dropins(box):
    for pkg in (
        f"linux-image-{KERNEL}",
        "linux-aws",
        f"lustre-client-modules-{KERNEL}",
        "lustre-client-utils",
        "slurmd",
        "slurm-client",
        "libpmix2",
        "munge",
        "libmunge2",
        "curl",
        "munge-tools",
    ):
        box.installed(pkg)
    r = box.run("hold_and_quiet")
    assert r.returncode == 0, r.stdout + r.stderr
    (hold,) = (box.stub / "apt-mark.log").read_text().splitlines()
    assert hold.split() == [
        "hold",
        f"linux-image-{KERNEL}",
        "linux-aws",
        "lustre-client-modules-6.8.0-1015-aws",
        "lustre-client-utils",
        "slurm-client",
        "slurmd",
        "libpmix2",
        "munge",
        "libmunge2",
    ]
    etc = box.tmp / "etc"
    assert (etc / "needrestart/conf.d/90-gpu-cluster.conf").read_bytes() == (
        BOOT / "conf/needrestart.conf"
    ).read_bytes()
    assert (etc / "apt/apt.conf.d/51gpu-cluster-unattended-upgrades").read_bytes() == (
        BOOT / "conf/unattended-upgrades.conf"
    ).read_bytes()


@pytest.mark.skipif(not PMIX_PLUGIN, reason="the step checks for Slurm's PMIx plugin on this machine")
def test_held_packages_count_as_installed_on_a_baked_root(box):
    # dpkg reports a held package as `hi`, not `ii`: a node booted from a root whose bake
    # held Slurm must verify it, not try to install it again
    for pkg in SLURM_PKGS:
        box.installed(pkg, "22.05.8-4+deb12u3")
        (box.state / f"held-{pkg}").touch()
    box.installed("munge")
    (box.state / "held-munge").touch()
    for b in ("munged", "mungekey", "munge", "unmunge"):
        box.add_stub(b, "")
    r = box.run("slurm; munge_pkg; hold_and_quiet", SLURM_SERIES="22.05")
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.apt() == []
    (hold,) = (box.stub / "apt-mark.log").read_text().splitlines()
    assert hold.split() == [
        "hold",
        "slurm-client",
        "slurm-wlm",
        "slurmctld",
        "slurmd",
        "slurmdbd",
        "libpmix-dev",
        "munge",
    ]


def test_hold_and_quiet_with_nothing_to_hold_fails(box):
    r = box.run("hold_and_quiet")
    assert r.returncode == 1
    assert box.reason.read_text().startswith("no kernel, Lustre, Slurm or munge package found to hold")


# --- baked images: the bake checks the image's own kernel; a baked node only verifies -----

IMAGE_K = "6.8.0-1016-aws"  # the kernel the image boots, newer than the one running the bake


def test_a_bake_checks_lustre_for_the_images_kernel_not_the_running_one(box):
    box.module(KERNEL)  # the running kernel has its module: beside the point
    r = box.run("lustre", BAKE_KERNEL=IMAGE_K)
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.apt() == [UPDATE, install_line(f"lustre-client-modules-{IMAGE_K}", "lustre-client-utils")]
    assert f"Lustre client for {IMAGE_K}" in r.stdout


def test_a_bake_without_a_lustre_client_for_the_images_kernel_fails_naming_it(box):
    (box.state / f"nocandidate-lustre-client-modules-{IMAGE_K}").touch()
    r = box.run("lustre", BAKE_KERNEL=IMAGE_K)
    assert r.returncode == 1
    assert box.reason.read_text() == (
        f"no lustre-client-modules-{IMAGE_K} for the image's kernel {IMAGE_K} in the FSx client repository: "
        "pin an AMI whose kernel has a Lustre client, or bake the client\n"
    )


def test_an_installed_module_package_built_for_another_kernel_fails_the_step(box):
    box.installed(f"lustre-client-modules-{KERNEL}")
    box.module(KERNEL, built_for="6.8.0-1009-aws")
    box.add_stub("mount.lustre", "")
    r = box.run("lustre")
    assert r.returncode == 1
    assert box.reason.read_text() == (
        f"Lustre module not available for the running kernel {KERNEL}: {box.root}/lib/modules/{KERNEL}/updates/fs/"
        f"lustre/lustre.ko was built for kernel '6.8.0-1009-aws', not {KERNEL} (modinfo -F vermagic): it would not "
        f"load; install lustre-client-modules-{KERNEL}\n"
    )


def test_a_bake_of_a_root_without_a_kernel_refuses_lustre_before_installing(box):
    r = box.run("main", GPU_CLUSTER_BAKE="1")
    assert r.returncode == 1
    assert box.reason.read_text() == (
        "the image has no kernel of its own (/boot/vmlinuz-*): cannot bake a Lustre client for it\n"
    )
    assert box.apt() == []


def baked_root(box: Box, verify: str) -> dict[str, str]:
    """A root with a manifest and a stand-in gpu-cluster-bake whose `verify` runs `verify`."""
    manifest = box.tmp / "manifest.json"
    manifest.write_text("{}")
    box.add_stub("gpu-cluster-bake", f'echo "$*" >>"$STUB/bake.log"\n{verify}')
    # boto3's virtualenv, baked from the payload's requirements (its stamp)
    req, venv = box.tmp / "aws-requirements.txt", box.tmp / "aws-venv"
    req.write_text("boto3==1.44.8 --hash=sha256:00\n")
    venv.mkdir()
    (venv / ".requirements.sha256").write_text(sha(req.read_bytes()) + "\n")
    return {
        "IMAGE_MANIFEST": str(manifest),
        "BAKE_PROGRAM": str(box.bin / "gpu-cluster-bake"),
        "AWS_REQUIREMENTS": str(req),
        "AWS_VENV": str(venv),
    }


def test_a_node_on_a_baked_image_verifies_and_downloads_nothing(box):
    env = baked_root(
        box,
        f"printf 'NODE_IMAGE_MANIFEST=%s\\nNODE_KERNEL=%s\\n# Lustre client: skipped for a reason\\n' {'f' * 64} {KERNEL}",
    )
    box.remove("curl")  # nothing may be downloaded (no mirror exists either)
    r = box.run("main", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.apt() == [] and (box.stub / "bake.log").read_text() == "verify\n"
    assert (box.tmp / "node-state/image.env").read_text() == f"NODE_IMAGE_MANIFEST={'f' * 64}\nNODE_KERNEL={KERNEL}\n"
    assert f"baked image: manifest sha256 {'f' * 64};" in r.stdout
    assert box.notes.read_text() == "20-packages: skipped: Lustre client: skipped for a reason\n"


def test_a_node_whose_image_differs_from_its_manifest_fails_with_the_difference(box):
    env = baked_root(
        box, "echo 'gpu-cluster-bake verify: slurmd is 23.11.5, the image was baked with 23.11.4' >&2; exit 1"
    )
    r = box.run("main", **env)
    assert r.returncode == 1
    assert box.reason.read_text() == (
        f"baked image ({env['IMAGE_MANIFEST']}): slurmd is 23.11.5, the image was baked with 23.11.4\n"
    )
    assert box.apt() == []


def test_a_node_whose_baked_boto3_has_other_pins_fails_instead_of_downloading(box):
    env = baked_root(box, f"printf 'NODE_IMAGE_MANIFEST=%s\\n' {'f' * 64}")
    Path(env["AWS_REQUIREMENTS"]).write_text("boto3==1.45.0 --hash=sha256:11\n")
    r = box.run("main", **env)
    assert r.returncode == 1
    assert box.reason.read_text() == (
        f"baked image: boto3 in {env['AWS_VENV']} was not installed from this {env['AWS_REQUIREMENTS']} (other pins): "
        "bake a new image (python3 -m ops bake) and pin it\n"
    )


def test_a_bake_ignores_an_existing_manifest_and_installs(box):
    env = baked_root(box, "exit 1")
    r = box.run(
        "[[ ${GPU_CLUSTER_BAKE:-0} != 1 && -e $IMAGE_MANIFEST ]] && echo verify || echo install",
        GPU_CLUSTER_BAKE="1",
        **env,
    )
    assert r.stdout == "install\n"


# --- boto3 for the controller's agents: its own venv, hash-pinned ------------------------

VENV_PYTHON_STUB = r"""
case "$*" in
  "-c import ensurepip, venv") [[ ! -e $STUB/state/no-ensurepip ]] ;;
  "-m venv --clear "*)
    d=${*: -1}; mkdir -p "$d/bin"; rm -f "$d/installed"
    printf '#!%s\necho "$*" >>"%s/pip.log"\n[[ -z ${STUB_PIP_FAILS:-} ]] || exit 1\n: >"%s/installed"\n' "$BASH" "$STUB" "$d" >"$d/bin/pip"
    printf '#!%s\n[[ -e "%s/installed" ]] || exit 1\n[[ $2 == *print* ]] && echo "1.44.8 1.44.8"\nexit 0\n' "$BASH" "$d" >"$d/bin/python3"
    chmod +x "$d/bin/pip" "$d/bin/python3"
    echo "venv $d" >>"$STUB/venv.log" ;;
  *) exit 2 ;;
esac
"""


def aws_env(box: Box, **more: str) -> dict[str, str]:
    req = box.tmp / "aws-requirements.txt"
    if not req.exists():
        req.write_text("boto3==1.44.8 --hash=sha256:00\n")
    venv = box.tmp / "aws-venv"
    return {
        "AWS_VENV": str(venv),
        "GPU_CLUSTER_AWS_PYTHON": str(venv / "bin/python3"),
        "AWS_REQUIREMENTS": str(req),
        **more,
    }


def pip_calls(box: Box) -> list[str]:
    log = box.stub / "pip.log"
    return log.read_text().splitlines() if log.exists() else []


PIP_ARGS = "install --quiet --disable-pip-version-check --no-input --require-hashes --no-deps --only-binary=:all:"


def test_aws_python_installs_the_pinned_boto3_into_its_own_venv(box):
    box.add_stub("python3", VENV_PYTHON_STUB)
    env = aws_env(box)
    r = box.run("aws_python", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert pip_calls(box) == [f"{PIP_ARGS} -r {env['AWS_REQUIREMENTS']}"]
    assert box.apt() == []  # python3-venv was there
    assert f"boto3/botocore 1.44.8 1.44.8 in {env['AWS_VENV']}" in r.stdout
    want = sha((box.tmp / "aws-requirements.txt").read_bytes())
    assert (box.tmp / "aws-venv/.requirements.sha256").read_text() == want + "\n"


def test_aws_python_from_local_wheels_uses_no_index(box):
    box.add_stub("python3", VENV_PYTHON_STUB)
    env = aws_env(box, AWS_WHEELS="/mirror/pypi")
    r = box.run("aws_python", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert pip_calls(box) == [f"{PIP_ARGS} --no-index --find-links /mirror/pypi -r {env['AWS_REQUIREMENTS']}"]


def test_aws_python_is_verified_not_reinstalled_until_the_pins_change(box):
    box.add_stub("python3", VENV_PYTHON_STUB)
    env = aws_env(box)
    assert box.run("aws_python", **env).returncode == 0
    r = box.run("aws_python", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(pip_calls(box)) == 1  # a baked image: verified, nothing downloaded
    (box.tmp / "aws-requirements.txt").write_text("boto3==1.44.9 --hash=sha256:01\n")
    assert box.run("aws_python", **env).returncode == 0
    assert len(pip_calls(box)) == 2


def test_aws_python_without_ensurepip_installs_python3_venv(box):
    box.add_stub("python3", VENV_PYTHON_STUB)
    (box.state / "no-ensurepip").touch()
    r = box.run("aws_python", **aws_env(box))
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.apt() == [UPDATE, install_line("python3-venv")]


def test_aws_python_pip_failure_names_the_requirements_file(box):
    box.add_stub("python3", VENV_PYTHON_STUB)
    env = aws_env(box, STUB_PIP_FAILS="1")
    r = box.run("aws_python", **env)
    assert r.returncode == 1
    assert box.reason.read_text().startswith(
        f"pip install -r {env['AWS_REQUIREMENTS']} into {env['AWS_VENV']} failed with status 1"
    )
    assert not (box.tmp / "aws-venv/.requirements.sha256").exists()


# --- the CloudWatch agent: Amazon's signed .deb (docs/logs.md) -----------------------------
# The REAL gpg: a key made for the test signs a stand-in .deb served from file:// URLs; the
# pinned fingerprint is that key's; a wrong key or a tampered package is refused before apt.
CW_VERSION = "1.300064.1b1344"
CW_DEB = b"a stand-in for amazon-cloudwatch-agent.deb\n"
needs_gpg = pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg (package gnupg) is not installed")


def _gpg(home: Path, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", "", *args],
        input=data,
        capture_output=True,
        check=True,
        timeout=60,
    )


def _key(home: Path, uid: str) -> str:
    home.mkdir(mode=0o700, parents=True)
    _gpg(home, "--quick-gen-key", uid, "ed25519", "sign", "never")
    out = _gpg(home, "--with-colons", "--fingerprint").stdout.decode()
    return next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Two signing keys: Amazon's stand-in and an impostor (ed25519: made in milliseconds)."""
    root = tmp_path_factory.mktemp("gpg")
    made = {name: (root / name, _key(root / name, f"{name} <{name}@example.com>")) for name in ("amazon", "other")}
    yield made
    # Making and using a secret key starts a gpg-agent per home, which outlives gpg itself;
    # left alone, every run of this module would leave two daemons behind.
    for home, _ in made.values():
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, timeout=30)


def _mirror(box: Box, keys, signer: str = "amazon", served_key: str = "amazon", deb: bytes = CW_DEB) -> dict[str, str]:
    d = box.tmp / "cw" / "ubuntu" / "amd64" / CW_VERSION
    d.mkdir(parents=True, exist_ok=True)
    (d / "amazon-cloudwatch-agent.deb").write_bytes(deb)
    home, _ = keys[signer]
    sig = _gpg(home, "--detach-sign", "--output", "-", data=CW_DEB).stdout  # signs the genuine bytes
    (d / "amazon-cloudwatch-agent.deb.sig").write_bytes(sig)
    (box.tmp / "cw" / "key.gpg").write_bytes(_gpg(keys[served_key][0], "--export").stdout)
    box.add_stub("gpg", f'exec {shutil.which("gpg")} "$@"')
    return {
        "CLOUDWATCH_AGENT_VERSION": CW_VERSION,
        "CLOUDWATCH_AGENT_URL": f"file://{d}/amazon-cloudwatch-agent.deb",
        "CLOUDWATCH_AGENT_KEY_URL": f"file://{box.tmp}/cw/key.gpg",
        "CLOUDWATCH_AGENT_KEY_FINGERPRINT": keys["amazon"][1],
        "DOWNLOAD_SHA256": f"amazon-cloudwatch-agent.deb={hashlib.sha256(CW_DEB).hexdigest()}",
        "STUB_VERSION_amazon_cloudwatch_agent": f"{CW_VERSION}-1",
    }


def _gpg_agents_under(path: Path) -> list[str]:
    """Command lines of the gpg-agent daemons whose home is under `path`."""
    lines = (b" ".join(argv) for _, argv in command_lines() if argv and argv[0].endswith(b"gpg-agent"))
    return [line.decode() for line in lines if str(path).encode() in line]


@needs_gpg
def test_a_package_signed_by_the_pinned_key_is_installed(box, keys):
    r = box.run("cloudwatch_agent", **_mirror(box, keys))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        box.apt()[-1].endswith("/amazon-cloudwatch-agent.deb") and " install --no-install-recommends /" in box.apt()[-1]
    )
    assert f"CloudWatch agent {CW_VERSION}-1 (signature checked with key {keys['amazon'][1]})" in r.stdout
    # installed: a second run downloads nothing
    box.installed("amazon-cloudwatch-agent", f"{CW_VERSION}-1")
    n = len(box.apt())
    assert box.run("cloudwatch_agent", **_mirror(box, keys)).returncode == 0 and len(box.apt()) == n


@needs_gpg
def test_a_key_file_with_another_key_is_refused_before_apt(box, keys):
    r = box.run("cloudwatch_agent", **_mirror(box, keys, signer="other", served_key="other"))
    assert r.returncode == 1
    # The check's throwaway keyring starts no gpg-agent. Asserted on a refusal: the step stops
    # there before removing the keyring, so an agent would outlive the boot (after a pass the
    # keyring's removal ends an agent within a second, too soon for a test to see it surely).
    assert _gpg_agents_under(box.tmp) == []
    assert box.reason.read_text().startswith(
        f"the key from file://{box.tmp}/cw/key.gpg is {keys['other'][1]}, not the pinned"
    )
    assert not any("install" in line for line in box.apt())


@needs_gpg
def test_a_signature_by_another_key_or_a_tampered_package_is_refused(box, keys):
    env = _mirror(box, keys, signer="other")  # the key file is Amazon's, the signature is not
    r = box.run("cloudwatch_agent", **env)
    assert r.returncode == 1 and "has no good signature by" in box.reason.read_text()
    tampered = CW_DEB.replace(b"stand-in", b"trojaned")
    env = {**_mirror(box, keys, deb=tampered), "DOWNLOAD_SHA256": "amazon-cloudwatch-agent.deb=record"}
    r = box.run("cloudwatch_agent", **env)
    assert r.returncode == 1 and "has no good signature by" in box.reason.read_text(), r.stdout
    assert not any("install" in line for line in box.apt())


def test_the_lanes_skip_it_with_their_reason(box):
    r = box.run("cloudwatch_agent", CLOUDWATCH_SKIP="no route to Amazon", CLOUDWATCH_AGENT_VERSION=CW_VERSION)
    assert r.returncode == 0 and f"SKIPPED: CloudWatch agent {CW_VERSION} (no route to Amazon)" in r.stdout
    assert box.apt() == []
