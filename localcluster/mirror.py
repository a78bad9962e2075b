"""A local mirror of the Enroot and Pyxis release downloads, laid out like upstream.

Step 20 downloads `$ENROOT_URL/v<ver>/enroot_<ver>-1_<arch>.deb` (+ the `enroot+caps`
companion) and `$PYXIS_URL/v<ver>.tar.gz` [ENROOT-REL] [PYXIS-TAGS]. The local lanes
cannot reach those hosts, so this module rebuilds the same files from the vendored
upstream release tarballs and lays them out under one directory with the same
relative paths; the lane points ENROOT_URL/PYXIS_URL at it (`file://` URLs, which
curl fetches like any other) and step 20 runs its normal download-and-install path.

The vendored tarballs come from the directory named by GPU_CLUSTER_VENDOR_DIR (set by
the Makefile/CI); nothing here knows where that is.

Enroot's own build links its helpers statically against musl from git submodules the
release tarball does not contain, so the helpers are built against glibc + libbsd and
the package Depends on libbsd0 instead. The packages follow upstream's Debian
packaging: files under /usr and /etc, the same runtime Depends, and a `+caps` package
whose postinst grants the two helpers their file capabilities [ENROOT-PKG].
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from model import pins
from model.archive import extract_all

VENDOR_ENV = "GPU_CLUSTER_VENDOR_DIR"
CACHE_ROOT = Path(os.environ.get("GPU_CLUSTER_CACHE", "/var/cache/gpu-cluster"))
# This module's code as loaded: part of the mirror's and the roots' cache keys.
SOURCE_SHA256 = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()

# The mirror's pins (model/pins.py). The product pins Enroot 4.2.1; the vendored copy's
# newest tag is 4.1.2, so a lane that installs from this mirror sets ENROOT_VERSION=4.1.2
# explicitly (and step 20 still checks that exact version). The vendored tarballs are
# checked against their pinned sha256 before anything is built from them; the packages
# built here get the digests of the files built (the lane's DOWNLOAD_SHA256), so step 20
# checks every file it downloads from the mirror as it does on a node.
# What the mirror does not serve: the CloudWatch agent (Amazon's bucket) and CloudWatch
# itself. Every lane node gets this reason as CLOUDWATCH_SKIP (docs/node-contract.md):
# step 20 installs no agent, step 25 starts none, the controller publishes no metrics.
CLOUDWATCH_SKIP = "the local lanes have no route to Amazon's CloudWatch agent downloads or to CloudWatch"
ENROOT_VERSION = pins.MIRROR_ENROOT_VERSION
PYXIS_VERSION = pins.MIRROR_PYXIS_VERSION
DEB_REVISION = "1"

HELPERS = ("aufs2ovlfs", "mksquashovlfs", "mount", "switchroot", "nsenter")
# Host tools the build needs, with the Debian package that provides each.
BUILD_TOOLS = {"gcc": "build-essential", "make": "build-essential", "dpkg-deb": "dpkg", "makeself": "makeself"}
BUILD_HEADERS = {"/usr/include/bsd/string.h": "libbsd-dev"}

# Runtime Depends of upstream's enroot package [ENROOT-PKG], with two local changes:
# libbsd0/libc6 because the helpers link dynamically here, `gawk` instead of
# `gawk | mawk` (minbase already has mawk, and Enroot's scripts are tested with gawk),
# `bsdextrautils` for column(1) (split out of bsdmainutils since Debian 11), and
# `makeself` because enroot-makeself is Debian's makeself rather than a vendored copy.
ENROOT_DEPENDS = (
    "libc6 (>= 2.34), libbsd0 (>= 0.11), bash (>= 4.2), curl, gawk, jq (>= 1.5), "
    "parallel, passwd, squashfs-tools, zstd, bsdextrautils, makeself"
)
CAPS_POSTINST = """#!/bin/sh
set -e
# Same grants as upstream's enroot+caps: lets unprivileged users import and convert images.
case "$1" in
  configure|abort-upgrade|abort-remove|abort-deconfigure)
    setcap cap_sys_admin+pe /usr/bin/enroot-mksquashovlfs
    setcap cap_sys_admin,cap_mknod+pe /usr/bin/enroot-aufs2ovlfs
    ;;
esac
exit 0
"""
CAPS_PRERM = """#!/bin/sh
set -e
case "$1" in
  remove|upgrade|deconfigure)
    setcap -r /usr/bin/enroot-mksquashovlfs 2>/dev/null || true
    setcap -r /usr/bin/enroot-aufs2ovlfs 2>/dev/null || true
    ;;
esac
exit 0
"""


class MirrorError(RuntimeError):
    pass


@dataclass(frozen=True)
class Mirror:
    root: Path  # directory holding enroot/ and pyxis/
    enroot_tarball_sha256: str
    pyxis_tarball_sha256: str
    debs: tuple[tuple[str, str], ...] = ()  # (file, sha256) of the Enroot packages built

    def download_sha256(self) -> str:
        """DOWNLOAD_SHA256 for a node installing from this mirror: the packages built here
        and the Pyxis archive, which is the vendored tarball unchanged."""
        words = [f"{name}={digest}" for name, digest in self.debs]
        return " ".join([*words, f"{pins.pyxis_archive(PYXIS_VERSION)}={self.pyxis_tarball_sha256}"])

    def enroot_base(self, served_at: str) -> str:
        """ENROOT_URL for a node that sees this mirror's root at `served_at`."""
        return f"file://{served_at}/enroot"

    def pyxis_base(self, served_at: str) -> str:
        return f"file://{served_at}/pyxis"

    def wheels(self, served_at: str) -> str:
        """AWS_WHEELS: the directory of the controller agents' boto3 wheels."""
        return f"{served_at}/pypi"


def vendor_dir() -> Path:
    """The vendored upstream tarballs, from GPU_CLUSTER_VENDOR_DIR (no default here)."""
    value = os.environ.get(VENDOR_ENV)
    if not value:
        raise MirrorError(
            f"{VENDOR_ENV}: not set; point it at the directory holding "
            f"enroot-{ENROOT_VERSION}.tar.gz and pyxis-{PYXIS_VERSION}.tar.gz "
            "(the Makefile sets it for `make` targets); `make vendor` downloads and checks them into ./vendor"
        )
    path = Path(value)
    missing = [n for n in vendor_files() if not (path / n).is_file()]
    if missing:
        raise MirrorError(
            f"{VENDOR_ENV}={value}: missing {', '.join(missing)}; `make vendor` downloads and checks them into ./vendor"
        )
    return path


def vendor_files() -> tuple[str, str]:
    return (f"enroot-{ENROOT_VERSION}.tar.gz", f"pyxis-{PYXIS_VERSION}.tar.gz")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def deb_arch() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True, text=True).stdout.strip()


def enroot_deb_names(arch: str) -> tuple[str, str]:
    """The two release asset names, exactly as upstream publishes them [ENROOT-REL]."""
    v = f"{ENROOT_VERSION}-{DEB_REVISION}"
    return f"enroot_{v}_{arch}.deb", f"enroot+caps_{v}_{arch}.deb"


def check_build_tools() -> None:
    missing = sorted(
        {pkg for tool, pkg in BUILD_TOOLS.items() if shutil.which(tool) is None}
        | {pkg for hdr, pkg in BUILD_HEADERS.items() if not Path(hdr).exists()}
    )
    if missing:
        raise MirrorError(
            f"building the Enroot packages needs: {' '.join(missing)} (apt-get install {' '.join(missing)})"
        )


def _run(cmd: list[str], log, cwd: Path | None = None) -> None:
    log.write(f"+ {' '.join(cmd)}\n".encode())
    log.flush()
    r = subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise MirrorError(f"`{' '.join(cmd)}` exited with {r.returncode} (log: {log.name})")


def _extract(tarball: Path, dest: Path) -> Path:
    with tarfile.open(tarball) as tar:
        extract_all(tar, dest)
    (top,) = [p for p in dest.iterdir() if p.is_dir()]
    return top


def _control(stage: Path, fields: dict[str, str], scripts: dict[str, str] | None = None) -> None:
    debian = stage / "DEBIAN"
    debian.mkdir(parents=True, exist_ok=True)
    (debian / "control").write_text("".join(f"{k}: {v}\n" for k, v in fields.items()))
    for name, body in (scripts or {}).items():
        (debian / name).write_text(body)
        (debian / name).chmod(0o755)
    etc = (
        sorted("/" + str(p.relative_to(stage)) for p in (stage / "etc").rglob("*") if p.is_file())
        if (stage / "etc").is_dir()
        else []
    )
    if etc:  # files under /etc are conffiles, as debhelper would mark them
        (debian / "conffiles").write_text("".join(f"{p}\n" for p in etc))


def _compile_helpers(src: Path, log) -> None:
    for h in HELPERS:
        # -include bsd/string.h: strlcpy & co. come from libbsd with glibc; -lbsd last
        # so --as-needed keeps it.
        _run(
            [
                "gcc",
                "-std=c99",
                "-O2",
                "-D_GNU_SOURCE",
                "-include",
                "bsd/string.h",
                f"bin/enroot-{h}.c",
                "-o",
                f"bin/enroot-{h}",
                "-lbsd",
            ],
            log,
            cwd=src,
        )


def _make_install(src: Path, stage: Path, log) -> None:
    makeself = src / "deps/dist/makeself/bin/enroot-makeself"
    makeself.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(shutil.which("makeself") or "makeself", makeself)
    # Upstream's Debian rules: build with clean paths first, then install into the
    # staging tree (installing alone would bake the staging path into `enroot`).
    layout = ["FORCE_GLIBC=1", "prefix=", "exec_prefix=/usr", "datarootdir=/usr/share"]
    keep = ["-o", "deps"] + [a for h in HELPERS for a in ("-o", f"bin/enroot-{h}")]
    _run(["make", *keep, *layout, "all"], log, cwd=src)
    _run(["make", *keep, *layout, f"DESTDIR={stage}", "install"], log, cwd=src)
    installed = stage / "usr/bin/enroot-makeself"
    installed.unlink()
    installed.symlink_to("/usr/bin/makeself")


def _enroot_controls(stage: Path, caps: Path, arch: str) -> None:
    """The control files of both packages: enroot itself, and enroot+caps (no files, only the
    maintainer scripts that set the helpers' capabilities)."""
    version = f"{ENROOT_VERSION}-{DEB_REVISION}"
    maint = "gpu-cluster local mirror <root@localhost>"
    _control(
        stage,
        {
            "Package": "enroot",
            "Version": version,
            "Architecture": arch,
            "Maintainer": maint,
            "Depends": ENROOT_DEPENDS,
            "Recommends": "pigz",
            "Section": "utils",
            "Priority": "optional",
            "Homepage": "https://github.com/NVIDIA/enroot",
            "Description": "Unprivileged container sandboxing utility\n"
            " Rebuilt from the upstream release source for a local mirror.",
        },
    )
    _control(
        caps,
        {
            "Package": "enroot+caps",
            "Version": version,
            "Architecture": arch,
            "Maintainer": maint,
            "Depends": f"enroot (= {version}), libcap2-bin",
            "Section": "utils",
            "Priority": "optional",
            "Homepage": "https://github.com/NVIDIA/enroot",
            "Description": "Unprivileged container sandboxing utility (extra capabilities)\n"
            " Grants the image import helpers their file capabilities.",
        },
        {"postinst": CAPS_POSTINST, "prerm": CAPS_PRERM},
    )


def build_enroot_debs(tarball: Path, out_dir: Path, arch: str, log) -> tuple[Path, Path]:
    """Build enroot_<v>-1_<arch>.deb and enroot+caps_<v>-1_<arch>.deb into out_dir."""
    check_build_tools()
    with tempfile.TemporaryDirectory(prefix="enroot-build-") as tmp:
        src = _extract(tarball, Path(tmp) / "src")
        _compile_helpers(src, log)
        stage = Path(tmp) / "enroot"
        _make_install(src, stage, log)
        caps = Path(tmp) / "caps"
        _enroot_controls(stage, caps, arch)
        main_deb, caps_deb = (out_dir / n for n in enroot_deb_names(arch))
        out_dir.mkdir(parents=True, exist_ok=True)
        _run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(stage), str(main_deb)], log)
        _run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(caps), str(caps_deb)], log)
    return main_deb, caps_deb


# The controller agents' boto3 (step 20 aws_python): the very wheels its hashed
# requirements name, downloaded from the package index once per mirror (pip checks each
# against its hash) and served to the lanes as a local directory (AWS_WHEELS).
AWS_REQUIREMENTS = Path(__file__).resolve().parent.parent / "nodeside" / "conf" / "aws-requirements.txt"


def download_wheels(requirements: Path, dest: Path, log) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
    cmd += ["--only-binary=:all:", "--require-hashes", "-r", str(requirements), "-d", str(dest)]
    try:
        _run(cmd, log)
    except MirrorError as err:
        raise MirrorError(
            f"downloading the wheels of {requirements.name} failed (needs the package index): {err}"
        ) from None


def mirror_key(vendor: Path, arch: str) -> str:
    h = hashlib.sha256()
    h.update(SOURCE_SHA256.encode())
    h.update(arch.encode())
    h.update(AWS_REQUIREMENTS.read_bytes())
    for name in vendor_files():
        h.update(name.encode() + sha256_file(vendor / name).encode())
    return h.hexdigest()[:16]


def build_mirror(vendor: Path | None = None, cache: Path | None = None) -> Mirror:
    """The mirror directory (built once per vendor tarball set; cached)."""
    vendor = vendor or vendor_dir()
    cache = cache or CACHE_ROOT / "mirror"
    arch = deb_arch()
    enroot_tgz, pyxis_tgz = (vendor / n for n in vendor_files())
    sums = (check_vendor_pin(enroot_tgz), check_vendor_pin(pyxis_tgz))
    final = cache / mirror_key(vendor, arch)
    if final.is_dir():
        return Mirror(final, *sums, built_debs(final, arch))
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    log_path = cache / f"{final.name}.log"
    try:
        with open(log_path, "wb") as log:
            build_enroot_debs(enroot_tgz, tmp / "enroot" / f"v{ENROOT_VERSION}", arch, log)
            download_wheels(AWS_REQUIREMENTS, tmp / "pypi", log)
        (tmp / "pyxis").mkdir()
        # GitHub's tag archive URL: <base>/v<ver>.tar.gz, top directory pyxis-<ver>/.
        shutil.copy2(pyxis_tgz, tmp / "pyxis" / f"v{PYXIS_VERSION}.tar.gz")
        tmp.chmod(0o755)
        try:
            tmp.rename(final)
        except OSError:  # another build finished first: same inputs, same result
            if not final.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return Mirror(final, *sums, built_debs(final, arch))


def check_vendor_pin(path: Path) -> str:
    """The tarball's sha256, which must be its pin in model/pins.py."""
    want, got = pins.vendor_pin(path.name).sha256, sha256_file(path)
    if got != want:
        raise MirrorError(f"{path}: sha256 {got}, but model/pins.py pins {want} (not the vendored release)")
    return got


def built_debs(root: Path, arch: str) -> tuple[tuple[str, str], ...]:
    d = root / "enroot" / f"v{ENROOT_VERSION}"
    return tuple((name, sha256_file(d / name)) for name in enroot_deb_names(arch))


def main() -> None:
    m = build_mirror()
    for p in sorted(m.root.rglob("*")):
        if p.is_file():
            print(p)


if __name__ == "__main__":
    main()
