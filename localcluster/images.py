"""Node root images for the faithful local lanes, built the way an AMI is baked.

A lane is a Debian release that brackets the nodes' Ubuntu 24.04 (Slurm 23.11):
`bookworm` (Debian 12, Slurm 22.05) and `trixie` (Debian 13, Slurm 24.11); and
`slurm2311`, Debian 12 with the nodes' own Slurm 23.11.4 built here and packaged under
Ubuntu's names (localcluster/slurm_build.py), served by a local apt repository
(localcluster/apt_repo.py) that step 20 installs from through its ordinary apt path.

Building a root, in stages (each named in errors, all output in one log):
1. base      `debootstrap --variant=minbase` [DEBOOTSTRAP], then what a DLAMI-like base has
             (systemd, cloud-init, curl, python3, ...), apt pointed at the archive
             this machine's own apt configuration uses. Cached on its own: it is the
             slow part, and a change to the boot scripts must not redo it.
2. copy      the cached base copied into a temp dir next to the final cache entry.
3. payload   the rendered node files laid down as cloud-init's write_files would on
             EC2, plus /etc/gpu-cluster/overrides.env with the lane's documented swaps
             (Enroot/Pyxis mirror URLs, the lane's pins, /fsx as a bind mount).
4. packages  the AWS bake's own command (`GPU_CLUSTER_BAKE=1 gpu-cluster-boot --only
             packages`, layout.BAKE_COMMAND: the SHIPPED step 20 in bake mode, which
             checks every pin and writes the image manifest) run inside the root with
             chroot (proc/sys/dev/tmpfs mounted in a private mount namespace, the
             Enroot/Pyxis mirror bound at MIRROR_MOUNT, a policy-rc.d that refuses
             service starts only for the bake): apt really installs Slurm, munge and
             PMIx from the archive, Enroot's .debs and Pyxis's source come through
             step 20's own download-and-install path.
5. clean     the bake's traces removed (`gpu-cluster-bake clean`, machine-id), the
             lane's record written beside the manifest: its key, stages, and the
             tags an AMI of it would carry (nodeside/bake.py image_tags).
6. rename    the temp dir renamed into the cache atomically: an entry exists only
             when its build finished.

Roots live under /var/cache/gpu-cluster/roots/<lane>-<hash>; the hash covers
everything that went in (lane, packages, this builder, the payload bytes - which
include step 20 and lib/ - the mirror's inputs and the pins). A cached root is
returned at once. Treat it as read-only: boot a copy or an overlay of it.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fcntl
import hashlib
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from clitools import exits, help, inputs
from clitools.runner import guarded
from localcluster import machine
from localcluster import mirror as mirror_mod
from localcluster.apt_repo import AptRepo
from nodeside import bake
from userdata import layout

CACHE_ROOT = mirror_mod.CACHE_ROOT
# The builder's own code as loaded (not as on disk later): a process that imported an
# older copy must not file its root under the newer code's key.
_SOURCE_SHA256 = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
HOST_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
HOST_SOURCES_LIST = Path("/etc/apt/sources.list")
HOST_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")  # debian-archive-keyring
# The lane's own record of a root (lane, key, build stages, the image tags an AMI of it
# would carry) beside the bake's manifest (layout.IMAGE_MANIFEST, nodeside/bake.py).
LANE_RECORD = "/var/lib/gpu-cluster-image/lane.json"
# Where the root sees the Enroot/Pyxis mirror during the bake (an empty directory after).
MIRROR_MOUNT = "/mnt/gpu-cluster-mirror"
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# What a DLAMI-like base has before our step 20 runs (no Slurm, munge, Enroot, Pyxis).
BASE_PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "cloud-init",
    "curl",
    "ca-certificates",
    "openssl",
    "iproute2",
    "python3",
    "procps",
    "util-linux",
    "kmod",
    "gnupg",
    # The DLAMI (Ubuntu 24.04) runs both after every apt run and daily: step 20's drop-ins
    # for them are exercised here, not just installed (tests/daemons: an apt upgrade on a
    # running lane node).
    "needrestart",
    "unattended-upgrades",
)
# The host's apt settings that the root's apt needs to reach the same archive the same
# way (e.g. a frozen snapshot whose Release files are past Valid-Until).
CARRIED_APT_OPTIONS = (
    "Acquire::Check-Valid-Until",
    "Acquire::Check-Date",
    "Acquire::http::Proxy",
    "Acquire::https::Proxy",
)
# A spec for the bake's payload: the bake needs only the files step 20 reads, and
# cloud-init writes every node file again at first boot; a fixed shape keeps the
# cache key independent of the build machine.
IMAGE_FACTS = "NodeName=image CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=4096\n"


@dataclass(frozen=True)
class Lane:
    name: str
    suite: str  # Debian codename debootstrap and apt use
    os_name: str
    slurm_series: str  # what step 20 checks (SLURM_SERIES)
    local_slurm: bool = False  # Slurm from the local apt repository (slurm_build.py), not the archive


LANES = {
    "bookworm": Lane("bookworm", "bookworm", "Debian 12", "22.05"),
    "trixie": Lane("trixie", "trixie", "Debian 13", "24.11"),
    "slurm2311": Lane("slurm2311", "bookworm", "Debian 12", "23.11", local_slurm=True),
}
# The local repository's versions win over the archive's packages of the same names
# (bookworm's 22.05 is older anyway; the pin says it explicitly).
LOCAL_REPO_PIN = 1001


class ImageBuildError(RuntimeError):
    pass


# --- the archive, from this machine's apt configuration ------------------------------


@dataclass(frozen=True)
class AptSource:
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]


def parse_deb822(text: str) -> list[AptSource]:
    """`Types: deb` stanzas of a deb822 .sources file (comments and deb-src ignored)."""
    out = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0].isspace() and key:
                fields[key] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
            continue
        out.append(
            AptSource(
                tuple(fields.get("uris", "").split()),
                tuple(fields.get("suites", "").split()),
                tuple(fields.get("components", "main").split()),
            )
        )
    return out


def parse_one_line(text: str) -> list[AptSource]:
    out = []
    for line in text.splitlines():
        words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(words) >= 3 and words[0] == "deb":
            out.append(AptSource((words[1],), (words[2],), tuple(words[3:]) or ("main",)))
    return out


def host_codename(os_release: str | None = None) -> str:
    text = os_release if os_release is not None else Path("/etc/os-release").read_text()
    m = re.search(r"^VERSION_CODENAME=\"?([a-z]+)", text, re.M)
    if not m:
        raise ImageBuildError("/etc/os-release: no VERSION_CODENAME; cannot tell which apt suites are the release's")
    return m.group(1)


def host_sources() -> list[AptSource]:
    sources = parse_deb822(HOST_SOURCES.read_text()) if HOST_SOURCES.exists() else []
    if not sources and HOST_SOURCES_LIST.exists():
        sources = parse_one_line(HOST_SOURCES_LIST.read_text())
    if not sources:
        raise ImageBuildError(
            f"{HOST_SOURCES}: no `Types: deb` entry (nor in {HOST_SOURCES_LIST}); "
            "the image build uses the archive this machine's apt uses"
        )
    return sources


def lane_sources(suite: str, sources: list[AptSource], codename: str) -> list[AptSource]:
    """The host's entries moved to `suite` (bookworm-updates -> trixie-updates, ...)."""
    out = []
    for s in sources:
        suites = tuple(suite + x[len(codename) :] for x in s.suites if x == codename or x.startswith(codename + "-"))
        if suites:
            out.append(AptSource(s.uris, suites, s.components))
    if not any(suite in s.suites for s in out):
        raise ImageBuildError(f"{HOST_SOURCES}: no entry for the release suite '{codename}' to derive '{suite}' from")
    return out


def archive_uri(sources: list[AptSource]) -> str:
    """The URI of the release's own suite (the one debootstrap bootstraps from)."""
    for s in sources:
        if any("-" not in x for x in s.suites):
            return s.uris[0]
    raise ImageBuildError(f"{HOST_SOURCES}: no entry for a release suite")


def render_sources(sources: list[AptSource], signed_by: str | None) -> str:
    blocks = []
    for s in sources:
        lines = [
            "Types: deb",
            f"URIs: {' '.join(s.uris)}",
            f"Suites: {' '.join(s.suites)}",
            f"Components: {' '.join(s.components)}",
        ]
        if signed_by:
            lines.append(f"Signed-By: {signed_by}")
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def carried_apt_conf() -> str:
    dump = subprocess.run(["apt-config", "dump"], check=True, capture_output=True, text=True).stdout
    lines = [ln for ln in dump.splitlines() if ln.split(" ", 1)[0] in CARRIED_APT_OPTIONS]
    return "".join(f"{ln}\n" for ln in lines)


# --- helpers -----------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tool_version(cmd: list[str]) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.stdout.strip()


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix[:-1] or point.startswith(prefix):
            points.append(point)
    return points


def _discard(tmp: Path) -> None:
    if not tmp.exists():
        return
    mounted = _mounts_under(tmp)
    if mounted:  # never delete through a bind mount of the host's /dev or /sys
        raise ImageBuildError(f"{tmp}: still has mounts {mounted}; not deleting it")
    shutil.rmtree(tmp)


@contextlib.contextmanager
def _cached_build(final: Path, kind: str, what: str) -> Iterator[tuple[_Stages, Path] | None]:
    """Builds the cache entry `final` once: yields the stages and an empty temp dir beside it.

    A concurrent build of the same key waits on the lock, then finds the entry and gets
    None. The temp dir is renamed to `final` only when the body finished, so an entry
    exists only when its build did; a failure names the stage and the log."""
    final.parent.mkdir(parents=True, exist_ok=True)
    with _locked(CACHE_ROOT / "locks" / f"{kind}-{final.name}"):
        if final.is_dir():
            yield None
            return
        st = _Stages(what, CACHE_ROOT / "logs" / f"{kind}-{final.name}.log")
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{final.name}-", dir=final.parent))
        try:
            yield st, tmp
            tmp.rename(final)
        except Exception as err:
            raise st.fail(err) from err
        finally:
            st.close()
            _discard(tmp)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # a concurrent build of the same key waits, then reuses it
        yield


def _debs_locked(lane: Lane) -> contextlib.AbstractContextManager[None]:
    # Builds of one suite share the .deb cache (bound at /var/cache/apt/archives in the
    # root); apt locks that directory and fails at once, without waiting, if another
    # build's apt holds it. Builds of the same suite take turns there.
    return _locked(CACHE_ROOT / "locks" / f"debs-{lane.suite}")


class _Stages:
    """Runs named stages, writing everything to one log; a failure names stage and log."""

    def __init__(self, what: str, log_path: Path):
        self.what, self.log_path = what, log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(log_path, "wb")
        self.stage = "start"
        self.times: dict[str, float] = {}

    def note(self, text: str) -> None:
        self.log.write(f"=== {time.strftime('%H:%M:%S')} {text}\n".encode())
        self.log.flush()

    @contextlib.contextmanager
    def run(self, stage: str):
        self.stage, start = stage, time.monotonic()
        self.note(f"stage {stage}")
        print(f"images: {self.what}: {stage} ...", file=sys.stderr, flush=True)
        yield
        self.times[stage] = round(time.monotonic() - start, 1)
        self.note(f"stage {stage} ok after {self.times[stage]}s")

    def cmd(self, cmd: list[str], label: str | None = None, **kw) -> None:
        self.note("+ " + (label or shlex.join(cmd)))
        r = subprocess.run(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **kw)
        if r.returncode != 0:
            raise ImageBuildError(f"`{label or shlex.join(cmd)}` exited with {r.returncode}")

    def fail(self, err: BaseException) -> ImageBuildError:
        self.note(f"FAILED in stage {self.stage}: {err}")
        return ImageBuildError(f"{self.what}: stage '{self.stage}' failed: {err} (log: {self.log_path})")

    def close(self) -> None:
        self.log.close()


# --- stage 1: the debootstrap base (cached separately) -------------------------------


def _base_key(lane: Lane, uri: str, sources_text: str, apt_conf: str) -> str:
    h = hashlib.sha256()
    for part in (
        lane.suite,
        uri,
        ",".join(BASE_PACKAGES),
        sources_text,
        apt_conf,
        _tool_version(["dpkg-query", "-W", "-f=${Version}", "debootstrap"]),
        _sha256(HOST_KEYRING.read_bytes()),
        _code_of(_bootstrap),
        _code_of(in_root),
        CHROOT_SCRIPT,
        POLICY_RC_D,
    ):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def _code_of(func: Callable[..., object]) -> str:
    # The builder's code as a syntax tree: reformatting or comments do not redo the base.
    return ast.dump(ast.parse(textwrap.dedent(inspect.getsource(func))))


def _bootstrap(st: _Stages, lane: Lane, root: Path, uri: str, sources: list[AptSource], apt_conf: str) -> None:
    debs = CACHE_ROOT / "debs" / lane.suite
    debs.mkdir(parents=True, exist_ok=True)
    # The base packages go in with apt, not debootstrap --include: debootstrap's resolver
    # ignores virtual packages (cloud-init -> python3-cryptography needs
    # python3-cffi-backend-api-*, provided by python3-cffi-backend) and fails.
    st.cmd(
        [
            "debootstrap",
            "--variant=minbase",
            f"--keyring={HOST_KEYRING}",
            f"--cache-dir={debs}",
            lane.suite,
            str(root),
            uri,
        ]
    )
    # apt in the root: the same archive entries as the host, moved to the lane's suite.
    keyrings = [
        k
        for k in ("debian-archive-keyring.gpg", "debian-archive-keyring.pgp")
        if (root / "usr/share/keyrings" / k).exists()
    ]
    signed_by = f"/usr/share/keyrings/{keyrings[0]}" if keyrings else None
    (root / "etc/apt/sources.list").unlink(missing_ok=True)
    (root / "etc/apt/sources.list.d/debian.sources").write_text(render_sources(sources, signed_by))
    if apt_conf:
        (root / "etc/apt/apt.conf.d/00gpu-cluster-archive").write_text(apt_conf)
    # debootstrap's downloads live in the shared cache, not in the image.
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    in_root(
        st,
        root,
        debs,
        None,
        [
            "sh",
            "-c",
            "apt-get -y update && DEBIAN_FRONTEND=noninteractive "
            "apt-get -y install --no-install-recommends " + " ".join(BASE_PACKAGES),
        ],
    )


def build_base(lane: Lane) -> Path:
    codename = host_codename()
    sources = lane_sources(lane.suite, host_sources(), codename)
    uri = archive_uri(sources)
    apt_conf = carried_apt_conf()
    key = _base_key(lane, uri, render_sources(sources, None), apt_conf)
    # Named by suite: lanes of one suite (bookworm, slurm2311) share one base.
    final = CACHE_ROOT / "bases" / f"{lane.suite}-{key}"
    if final.is_dir():
        return final
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap not found: apt-get install debootstrap")
    with _cached_build(final, "base", f"base {lane.name}") as build:
        if build is not None:
            st, tmp = build
            try:
                with st.run("base"):
                    tmp.chmod(0o755)
                    with _debs_locked(lane):
                        _bootstrap(st, lane, tmp, uri, sources, apt_conf)
            except Exception:
                inner = tmp / "debootstrap/debootstrap.log"
                if inner.exists():  # it lives in the root that is about to be discarded
                    st.note(
                        "debootstrap.log (tail):\n" + "\n".join(inner.read_text(errors="replace").splitlines()[-80:])
                    )
                raise
    return final


# --- stages 2-6: the baked root ----------------------------------------------------------


def seed_tree(st: _Stages, base: Path, tmp: Path, files: dict[str, bytes], settings: dict[str, str]) -> None:
    """Stages copy and payload of a root (the baked one here, the plain one in
    plain_root.py): the base debootstrap tree, the node files, overrides.env."""
    with st.run("copy"):
        tmp.chmod(0o755)
        st.cmd(["cp", "-a", "--reflink=auto", f"{base}/.", str(tmp)])
    with st.run("payload"):
        lay_down(tmp, files)
        lay_down(tmp, {layout.OVERRIDES_ENV: machine.env_text(settings)})


def lane_settings(lane: Lane, mirror: mirror_mod.Mirror) -> dict[str, str]:
    """The lane's documented swaps (docs/node-contract.md), as overrides.env holds them."""
    return {
        "ENROOT_URL": mirror.enroot_base(MIRROR_MOUNT),
        "PYXIS_URL": mirror.pyxis_base(MIRROR_MOUNT),
        "ENROOT_VERSION": mirror_mod.ENROOT_VERSION,
        "DOWNLOAD_SHA256": mirror.download_sha256(),
        "AWS_WHEELS": mirror.wheels(MIRROR_MOUNT),
        "SLURM_SERIES": lane.slurm_series,
        "GPU_CLUSTER_FSX": "bind",
        "CLOUDWATCH_SKIP": mirror_mod.CLOUDWATCH_SKIP,
    }


def default_payload() -> dict[str, bytes]:
    """The node files of a small stack, from the real renderer (what write_files writes)."""
    from localcluster import profile
    from userdata.render import FsxEndpoint, render_userdata

    spec = profile.test_instance_spec(profile.slurmd_facts(IMAGE_FACTS))
    out = render_userdata(
        profile.local_config("image", 2),
        spec,
        FsxEndpoint(dns_name=profile.FSX_DNS, mount_name=profile.FSX_MOUNT),
        payload_uri="file:///var/lib/gpu-cluster-payload/{sha256}.tar.gz",
        cgroup_plugin="cgroup/v1",
    )
    return dict(out.files)


def file_mode(path: str, content: bytes) -> int:
    # Programs start with "#!" (entry point, steps, helpers); everything else is data.
    return 0o755 if content.startswith(b"#!") else 0o644


def lay_down(root: Path, files: dict[str, bytes]) -> None:
    for path, content in sorted(files.items()):
        if not path.startswith("/") or ".." in Path(path).parts:
            raise ImageBuildError(f"payload path {path!r}: must be absolute, without '..'")
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(content)
        dest.chmod(file_mode(path, content))


def _root_key(
    lane: Lane,
    base: Path,
    mirror: mirror_mod.Mirror,
    settings: dict[str, str],
    files: dict[str, bytes],
    local_repo: str = "",
) -> str:
    h = hashlib.sha256()
    for part in (
        lane.name,
        lane.suite,
        lane.slurm_series,
        base.name,
        mirror.root.name,
        mirror.enroot_tarball_sha256,
        mirror.pyxis_tarball_sha256,
        json.dumps(settings, sort_keys=True),
        _SOURCE_SHA256,
        mirror_mod.SOURCE_SHA256,
        *([local_repo] if local_repo else []),  # the local repository's directory: a hash of its .debs
    ):
        h.update(part.encode() + b"\0")
    for path, content in sorted(files.items()):
        h.update(path.encode() + b"\0" + _sha256(content).encode() + b"\0")
    return h.hexdigest()[:16]


# Runs as root inside a private mount namespace (unshare), so every mount below ends
# with the command and none can leak onto the host.
CHROOT_SCRIPT = rf"""
set -euo pipefail
root=$1 debs=$2 mirror=$3
shift 3
mount -t proc proc "$root/proc"
mount -t sysfs -o ro sysfs "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/run"
mount -t tmpfs tmpfs "$root/tmp"
mkdir -p "$debs/partial"
mount --bind "$debs" "$root/var/cache/apt/archives"
if [[ -n $mirror ]]; then
  mkdir -p "$root{MIRROR_MOUNT}"
  mount --bind -o ro "$mirror" "$root{MIRROR_MOUNT}"
fi
exec chroot "$root" /usr/bin/env -i PATH={CHROOT_PATH} HOME=/root LANG=C.UTF-8 "$@"
"""

# An image builder's guard: maintainer scripts may not start services during the bake
# (invoke-rc.d asks policy-rc.d; 101 = action forbidden) [POLICY-RC.D].
POLICY_RC_D = "#!/bin/sh\n# gpu-cluster image bake: no service starts inside the build root\nexit 101\n"


def in_root(st: _Stages, root: Path, debs: Path, mirror: Path | None, argv: list[str]) -> None:
    """Run argv chrooted into root (stdin /dev/null: no terminal, as on a booting node)."""
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text(POLICY_RC_D)
    policy.chmod(0o755)
    # apt inside the root resolves the archive with the host's resolver.
    (root / "etc/resolv.conf").unlink(missing_ok=True)
    shutil.copy2("/etc/resolv.conf", root / "etc/resolv.conf")
    try:
        st.cmd(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "bash",
                "-c",
                CHROOT_SCRIPT,
                "chroot",
                str(root),
                str(debs),
                str(mirror or ""),
                *argv,
            ],
            label=f"chroot {root} {shlex.join(argv)}",
        )
    finally:
        policy.unlink(missing_ok=True)


# The DLAMI's ordinary login user (uid 1000): a lane root has the same account, so the
# local cluster runs a container job as an ordinary user too (Enroot's unprivileged path,
# where the root-run gate never goes).
ORDINARY_USER, ORDINARY_UID = "ubuntu", 1000


def _bake(st: _Stages, lane: Lane, root: Path, mirror: mirror_mod.Mirror, repo: AptRepo | None = None) -> None:
    """The AWS bake's own commands (layout.BAKE_COMMAND, then BAKE_CLEAN), chrooted:
    step 20 in bake mode installs, checks and writes the manifest. A lane's local apt
    repository is bound read-only at its mount point meanwhile."""
    try:
        with _repo_bound(root, repo):
            in_root(st, root, CACHE_ROOT / "debs" / lane.suite, mirror.root, list(layout.BAKE_COMMAND))
    finally:
        boot_log = root / layout.BOOT_LOG.lstrip("/")
        if boot_log.exists():
            st.note("bake boot.log:\n" + boot_log.read_text(errors="replace"))
    _chroot_out(root, *layout.BAKE_CLEAN)
    _chroot_out(root, "useradd", "--create-home", "--uid", str(ORDINARY_UID), "--shell", "/bin/bash", ORDINARY_USER)


@contextlib.contextmanager
def _repo_bound(root: Path, repo: AptRepo | None) -> Iterator[None]:
    """The local apt repository read-only at its mount point inside the root, for the bake
    (the chroot's private mount namespace copies the mount; it is undone after)."""
    if repo is None:
        yield
        return
    src, dst = repo.bind()
    point = root / dst.lstrip("/")
    point.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", "-o", "ro", src, str(point)], check=True, capture_output=True, text=True)
    try:
        yield
    finally:
        subprocess.run(["umount", str(point)], check=True, capture_output=True, text=True)


def local_repo(lane: Lane) -> AptRepo | None:
    """The lane's local apt repository (built and cached on first use), if it has one."""
    if not lane.local_slurm:
        return None
    from localcluster import slurm_build

    return slurm_build.apt_repo()


def _chroot_out(root: Path, *cmd: str) -> str:
    return subprocess.run(
        ["chroot", str(root), *cmd], check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL
    ).stdout


def image_result(root: Path) -> tuple[dict, str, dict[str, str]]:
    """(manifest, sha256, tags) of a baked root: what `ops bake` reads back from a build
    instance and tags the AMI with, read here from the root's own files."""
    manifest, digest = bake.read_manifest(str(root))
    return manifest, digest, bake.image_tags(manifest, digest)


def _clean(st: _Stages, root: Path, record: dict) -> None:
    # The bake's clean (BAKE_CLEAN) removed its status marker and boot log: a node booted
    # from this image starts as a new instance. cloud-init's state goes too (on EC2 the
    # bake runs `cloud-init clean`).
    shutil.rmtree(root / "var/lib/cloud", ignore_errors=True)
    # An empty machine-id: each machine booted from the image gets its own. No
    # hostname either (debootstrap copies the build machine's): cloud-init sets it.
    (root / "etc/machine-id").write_text("")
    (root / "etc/hostname").write_text("localhost\n")
    (root / MIRROR_MOUNT.lstrip("/")).mkdir(parents=True, exist_ok=True)
    dest = root / LANE_RECORD.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def root_size_bytes(root: Path) -> int:
    out = subprocess.run(["du", "-sxb", str(root)], check=True, capture_output=True, text=True).stdout
    return int(out.split()[0])


def build_root(lane: str, payload_files: dict[str, bytes] | None = None) -> Path:
    """A finished root for `lane` (cached by the hash of its inputs); treat it as read-only."""
    if lane not in LANES:
        raise ImageBuildError(f"lane {lane!r}: unknown; lanes are {', '.join(LANES)}")
    ln = LANES[lane]
    if os.geteuid() != 0:
        raise ImageBuildError("building a root needs root (debootstrap, chroot, mounts)")
    base = build_base(ln)
    mirror = mirror_mod.build_mirror()
    repo = local_repo(ln)
    files = payload_files if payload_files is not None else default_payload()
    files = {**files, **(repo.apt_files(LOCAL_REPO_PIN) if repo else {})}
    settings = lane_settings(ln, mirror)
    key = _root_key(ln, base, mirror, settings, files, repo.root.name if repo else "")
    final = CACHE_ROOT / "roots" / f"{lane}-{key}"
    if final.is_dir():
        return final
    with _cached_build(final, "root", f"root {lane}") as build:
        if build is not None:
            st, tmp = build
            seed_tree(st, base, tmp, files, settings)
            with st.run("packages"), _debs_locked(ln):
                _bake(st, ln, tmp, mirror, repo)
            with st.run("clean"):
                _, digest, tags = image_result(tmp)
                record = {
                    "lane": lane,
                    "suite": ln.suite,
                    "os": ln.os_name,
                    "key": key,
                    "base": base.name,
                    "mirror": mirror.root.name,
                    "settings": settings,
                    "image_manifest_sha256": digest,
                    "image_tags": tags,
                    # Lane machines get each repository bound read-only at its mount point.
                    "apt_repos": {repo.mount_point: str(repo.root)} if repo else {},
                    "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "stages": st.times,
                }
                _clean(st, tmp, record)
    return final


def apt_repo_binds(root: Path) -> list[tuple[str, str]]:
    """(host path, mount point) of the local apt repositories a root was baked with."""
    path = root / LANE_RECORD.lstrip("/")
    repos = json.loads(path.read_text()).get("apt_repos", {}) if path.exists() else {}
    return [(host, point) for point, host in sorted(repos.items())]


def prune(keep: int) -> list[Path]:
    """Delete all but the `keep` newest roots and bases of each lane; returns what went.

    Run it only when no machine is booted from an older root (their copies or
    overlays may still read it)."""
    gone = []
    for kind in ("roots", "bases"):
        for lane in LANES:
            entries = sorted((CACHE_ROOT / kind).glob(f"{lane}-*"), key=lambda p: p.stat().st_mtime, reverse=True)
            for old in entries[keep:]:
                _discard(old)
                gone.append(old)
    return gone


def main(argv: list[str] | None = None) -> int:
    """Exit status (clitools/exits.py): 0 ok, 1 the build failed (the step is named),
    2 usage, 4 an internal error."""
    args = parser().parse_args(argv)
    return guarded(f"python3 -m localcluster.images {args.cmd}", lambda: _run(args))


def parser() -> argparse.ArgumentParser:
    prog = "python3 -m localcluster.images"
    ap = help.parser(
        prog,
        "Build (or find cached) node root images for the local lanes.",
        "python3 -m localcluster.images build --lane bookworm --size",
    )
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    b = help.command(
        sub,
        "build",
        "build the lane's root (cached) and print its path",
        "python3 -m localcluster.images build --lane trixie",
    )
    b.add_argument("--lane", choices=sorted(LANES), required=True, help="the lane whose root to build")
    b.add_argument("--size", action="store_true", help="also print the root's size")
    pr = help.command(
        sub,
        "prune",
        "delete all but the newest roots/bases of each lane",
        "python3 -m localcluster.images prune --keep 2",
    )
    pr.add_argument("--keep", type=inputs.number(int, 1, 100), default=2, help="roots and bases kept per lane")
    return ap


def _run(args: argparse.Namespace) -> int:
    if args.cmd == "prune":
        for gone in prune(args.keep):
            print(f"images: removed {gone}")
        return exits.OK
    start = time.monotonic()
    try:
        root = build_root(args.lane)
    except (ImageBuildError, mirror_mod.MirrorError) as err:
        print(f"images: {err}", file=sys.stderr)
        return exits.FAILED
    print(f"images: {args.lane} root ready after {time.monotonic() - start:.1f}s", file=sys.stderr)
    if args.size:
        print(f"images: size {root_size_bytes(root) / 2**20:.0f} MiB", file=sys.stderr)
    print(root)
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
