"""Slurm 23.11 (the nodes' Ubuntu 24.04 Slurm) built here and packaged under Ubuntu's names.

Debian has Slurm 22.05 (bookworm) and 24.11 (trixie); the nodes run Ubuntu 24.04's
23.11.4. The `slurm2311` lane installs this build through the boot's own apt path (step
20's `apt-get install slurm-wlm slurmd slurmctld slurmdbd slurm-client libpmix-dev`, then
libslurm-dev for Pyxis), so the packages carry Ubuntu's names, paths and relations
[UBUNTU-SLURM], not the release tarball's own debian/ packaging (which builds
`slurm-smd-*`):
- slurm-wlm (depends on slurm-client, slurmctld, slurmd of the same version),
  slurmd, slurmctld, slurmdbd, slurm-client, slurm-wlm-basic-plugins,
  slurm-wlm-mysql-plugin (accounting_storage_mysql and jobcomp_mysql, linked against
  Debian's MariaDB client library as Ubuntu's are against its own), libslurm40t64,
  libslurm-dev;
- plugins (and the private libslurmfull.so) in /usr/lib/<triplet>/slurm-wlm, which step 20
  checks for mpi_pmix.so; configuration in /etc/slurm (plugstack.conf, a conffile of
  slurm-wlm-basic-plugins, with its plugstack.conf.d); daemons in /usr/sbin, commands in
  /usr/bin, units in /lib/systemd/system, /etc/default/slurmd and /etc/default/slurmctld;
- the `slurm` system user (uid 64030, as Debian's and Ubuntu's packages make it) from
  slurm-wlm-basic-plugins' preinst; slurmd's and slurmctld's postinst own their state and
  log directories by it, enable their units and start them through invoke-rc.d (which
  the bake's policy-rc.d refuses, as on an image build);
- Depends computed from what the files link (objdump NEEDED -> the library's package on
  this machine, at least its installed version), plus the relations Ubuntu's packages
  declare between themselves (`= version`), munge and ucf.
Differences from Ubuntu's build, on purpose: it links against this machine's (Debian 12)
libraries, which the lane's Debian 12 root has; the version is 23.11.4-0local1 (not
Ubuntu's 23.11.4-1.2ubuntu5, which it is not); no slurmrestd, sackd or sview (no lane
uses them); daemons are the real binaries, not the
`-wlm` alternatives Debian's older packages used.

Two cache entries, each built in a temp dir and renamed (a concurrent build of the
same key waits on a lock, then reuses it):
- `slurm-build/<key>`: `make install` into a staging tree, keyed by the tarball's sha256
  (pinned in model/pins.py), the build code below (as a syntax tree), this machine's
  architecture and the versions of the -dev packages it links against; ~4 minutes on 2
  idle cores (SOURCES notes), the expensive part;
- `slurm-debs/<key>`: the .debs, keyed by the build key and this module's code.
`apt_repo()` serves the .debs as the local apt repository `slurm-23.11`.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fcntl
import hashlib
import inspect
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

from localcluster import apt_repo as apt_repo_mod
from localcluster import mirror as mirror_mod
from model import pins
from model.archive import extract_all

CACHE_ROOT = mirror_mod.CACHE_ROOT
SOURCE_SHA256 = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
SLURM_VERSION = pins.LANE_SLURM_VERSION
DEB_VERSION = f"{SLURM_VERSION}-0local1"
TARBALL = f"slurm-{SLURM_VERSION}.tar.gz"
REPO_NAME = "slurm-23.11"
LIBSLURM_PACKAGE = "libslurm40t64"  # Ubuntu 24.04's name (soname 40, t64 transition)
MYSQL_PLUGINS = ("accounting_storage_mysql.so", "jobcomp_mysql.so")  # Ubuntu's slurm-wlm-mysql-plugin
SLURM_UID = 64030  # Debian's and Ubuntu's fixed uid for the slurm user
# What the build links against (header or tool -> Debian package); their versions are in
# the build key.
BUILD_DEPS = {
    "/usr/include/munge.h": "libmunge-dev",
    "/usr/include/hwloc.h": "libhwloc-dev",
    "/usr/include/json-c/json.h": "libjson-c-dev",
    "/usr/include/dbus-1.0/dbus/dbus.h": "libdbus-1-dev",
    "/usr/include/lz4.h": "liblz4-dev",
    "/usr/include/numa.h": "libnuma-dev",
    "/usr/include/security/pam_appl.h": "libpam0g-dev",
    "/usr/include/yaml.h": "libyaml-dev",
    "/usr/include/readline/readline.h": "libreadline-dev",
    "/usr/include/openssl/ssl.h": "libssl-dev",
    "/usr/bin/mariadb_config": "libmariadb-dev",
}
BUILD_TOOLS = {"gcc": "build-essential", "make": "build-essential", "pkg-config": "pkg-config",
               "objdump": "binutils", "dpkg-deb": "dpkg"}  # fmt: skip


class SlurmBuildError(RuntimeError):
    pass


def triplet() -> str:
    out = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True).stdout.strip()
    if not out:
        raise SlurmBuildError("gcc -print-multiarch printed nothing: cannot name /usr/lib/<triplet>")
    return out


def plugin_dir(trip: str) -> str:
    return f"/usr/lib/{trip}/slurm-wlm"


def missing_build_deps() -> list[str]:
    return sorted(
        {pkg for tool, pkg in BUILD_TOOLS.items() if shutil.which(tool) is None}
        | {pkg for header, pkg in BUILD_DEPS.items() if not Path(header).exists()}
        | ({"libpmix-dev"} if not list(Path("/usr/lib").glob("*/pmix2/include")) else set())
    )


def tarball(vendor: Path | None = None) -> Path:
    """The vendored release tarball, checked against its pin."""
    path = (vendor or mirror_mod.vendor_dir()) / TARBALL
    if not path.is_file():
        raise SlurmBuildError(f"{path}: not found (the vendored Slurm {SLURM_VERSION} release source)")
    mirror_mod.check_vendor_pin(path)
    return path


# --- the build (its code is part of the build key) ------------------------------------


def configure_args(trip: str) -> list[str]:
    # Ubuntu's paths; PMIx from Debian's libpmix-dev (pmix2 = the v4/v5 API directory).
    return [
        "--prefix=/usr",
        "--sysconfdir=/etc/slurm",
        f"--libdir=/usr/lib/{trip}",
        "--localstatedir=/var",
        "--runstatedir=/run",
        f"--with-pmix=/usr/lib/{trip}/pmix2",
        "--with-munge",
        "--disable-debug",
        "--disable-dependency-tracking",
        "--disable-slurmrestd",
        # slurmdbd's storage plugin; configure fails (not just warns) when a path is given
        # and mariadb_config is missing, so a build without it cannot pass unnoticed.
        "--with-mysql_config=/usr/bin",
    ]


def compile_and_install(src: Path, stage: Path, trip: str, log) -> None:
    """configure, make, make install into stage; pkglibdir is Ubuntu's (the plugin
    directory is compiled in as the default PluginDir)."""
    pkglib = f"pkglibdir={plugin_dir(trip)}"
    jobs = f"-j{os.cpu_count() or 1}"
    for cmd in (
        ["./configure", *configure_args(trip)],
        ["make", jobs, pkglib],
        ["make", pkglib, f"DESTDIR={stage}", "install"],
    ):
        _run(cmd, log, cwd=src)


def _run(cmd: list[str], log, cwd: Path | None = None) -> None:
    log.write(f"=== {time.strftime('%H:%M:%S')} + {' '.join(cmd)}\n".encode())
    log.flush()
    r = subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise SlurmBuildError(f"`{' '.join(cmd)}` exited with {r.returncode} (log: {log.name})")


def _code_of(*funcs) -> str:
    return "".join(ast.dump(ast.parse(textwrap.dedent(inspect.getsource(f)))) for f in funcs)


def _dev_versions() -> str:
    pkgs = sorted(set(BUILD_DEPS.values()) | {"libpmix-dev"})
    r = subprocess.run(["dpkg-query", "-W", "-f=${Package}=${Version}\n", *pkgs], capture_output=True, text=True)
    return r.stdout


def build_key(source: Path, trip: str) -> str:
    h = hashlib.sha256()
    for part in (
        mirror_mod.sha256_file(source),
        trip,
        _code_of(configure_args, compile_and_install, plugin_dir),
        _dev_versions(),
    ):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _cached(final: Path, what: str) -> Iterator[tuple[Path, object] | None]:
    """Yields (empty temp dir beside final, log) when final must be built, else None."""
    final.parent.mkdir(parents=True, exist_ok=True)
    lock = CACHE_ROOT / "locks" / f"{final.parent.name}-{final.name}"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if final.is_dir():
            yield None
            return
        log_path = CACHE_ROOT / "logs" / f"{final.parent.name}-{final.name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{final.name}-", dir=final.parent))
        print(f"slurm_build: {what} ... (log: {log_path})", file=sys.stderr, flush=True)
        try:
            with open(log_path, "wb") as log:
                yield tmp, log
            tmp.chmod(0o755)
            tmp.rename(final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)


def build_stage(vendor: Path | None = None) -> Path:
    """The installed tree of Slurm 23.11 (built once per machine and input; cached)."""
    if os.geteuid() != 0:
        raise SlurmBuildError("building Slurm's packages needs root (files owned by root in the .debs)")
    missing = missing_build_deps()
    if missing:
        raise SlurmBuildError(f"building Slurm {SLURM_VERSION} needs: apt-get install {' '.join(missing)}")
    source, trip = tarball(vendor), triplet()
    final = CACHE_ROOT / "slurm-build" / build_key(source, trip)
    with _cached(final, f"building Slurm {SLURM_VERSION} from {source.name}") as build:
        if build is not None:
            tmp, log = build
            with tarfile.open(source) as tar:
                extract_all(tar, tmp / "src")
            (src,) = list((tmp / "src").iterdir())
            compile_and_install(src, tmp / "stage", trip, log)
            shutil.rmtree(tmp / "src")
    return final / "stage"


# --- packaging under Ubuntu's names --------------------------------------------------


PLUGSTACK_CONF = (
    "# SPANK plugins: one file per plugin in /etc/slurm/plugstack.conf.d\ninclude /etc/slurm/plugstack.conf.d/*.conf\n"
)
DEFAULT_SLURMD = '# Options for slurmd (see slurmd(8)), read by its unit\n#SLURMD_OPTIONS=""\n'
DEFAULT_SLURMDBD = '# Options for slurmdbd (see slurmdbd(8)), read by its unit\n#SLURMDBD_OPTIONS=""\n'
DEFAULT_SLURMCTLD = '# Options for slurmctld (see slurmctld(8)), read by its unit\n#SLURMCTLD_OPTIONS=""\n'
PREINST_USER = f"""#!/bin/sh
set -e
# The slurm system user with Debian's and Ubuntu's fixed uid, before any file is unpacked.
if [ "$1" = install ] && ! getent passwd slurm >/dev/null; then
  adduser --quiet --system --group --uid {SLURM_UID} --no-create-home --home /nonexistent slurm
fi
exit 0
"""


def daemon_postinst(daemon: str) -> str:
    """Own the daemon's state and log directories by slurm, enable its unit, and start it
    where policy allows (an image bake's policy-rc.d refuses, as it should)."""
    return f"""#!/bin/sh
set -e
if [ "$1" = configure ]; then
  chown slurm:slurm /var/lib/slurm /var/lib/slurm/{daemon} /var/log/slurm
  if [ -d /run/systemd/system ] || [ -z "$2" ]; then
    deb-systemd-helper unmask {daemon}.service >/dev/null || true
    deb-systemd-helper enable {daemon}.service >/dev/null || true
  fi
  if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
    invoke-rc.d {daemon} start || true
  fi
fi
exit 0
"""


def daemon_prerm(daemon: str) -> str:
    return f"""#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
  invoke-rc.d {daemon} stop || true
fi
exit 0
"""


def daemon_postrm(daemon: str) -> str:
    return f"""#!/bin/sh
set -e
if [ "$1" = purge ]; then
  deb-systemd-helper purge {daemon}.service >/dev/null || true
fi
exit 0
"""


# The file each unit waits for: its daemon's own configuration.
UNIT_CONDITION = {
    "slurmd.service": "slurm.conf",
    "slurmctld.service": "slurm.conf",
    "slurmdbd.service": "slurmdbd.conf",
}


def unit(source: Path, name: str) -> str:
    """The release's own systemd unit (etc/<name>.in), with configure's substitutions and,
    as Debian's and Ubuntu's units have it, ConditionPathExists on slurm.conf: the
    packages enable their units at install, and a daemon started at boot before the boot
    wrote slurm.conf (or on a node that never runs it: slurmd on a dedicated controller)
    must be skipped, not failed (a failed unit leaves systemd degraded). slurmdbd's unit
    carries its own condition (slurmdbd.conf), which is on every image and written only
    on a controller with accounting."""
    with tarfile.open(source) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(f"/etc/{name}.in"))
        f = tar.extractfile(member)
        text = f.read().decode() if f else ""
    for key, value in {"@sysconfdir@": "/etc/slurm", "@sbindir@": "/usr/sbin",
                       "@SYSTEMD_TASKSMAX_OPTION@": "TasksMax=infinity"}.items():  # fmt: skip
        text = text.replace(key, value)
    if "@" in re.sub(r"[\w.-]+@[\w.-]+", "", text):
        raise SlurmBuildError(f"{name}: an unsubstituted @...@ is left")
    condition = f"ConditionPathExists=/etc/slurm/{UNIT_CONDITION[name]}"
    text = text.replace(f"#{condition}", condition)
    if condition not in text.splitlines():
        raise SlurmBuildError(f"{name}: no {condition} line to keep")
    return text


def package_specs(trip: str) -> list[dict]:
    """Ubuntu 24.04's packages: name, description, files (globs in the staging tree),
    Depends besides what the files link, maintainer scripts and files we add."""
    lib, plug = f"usr/lib/{trip}", plugin_dir(trip).lstrip("/")
    same = f"(= {DEB_VERSION})"
    return [
        {"name": "slurm-wlm-basic-plugins", "desc": "Slurm basic plugins",
         "files": [f"{plug}/*.so"], "exclude": [f"{plug}/{p}" for p in MYSQL_PLUGINS], "depends": ["adduser"], "scripts": {"preinst": PREINST_USER},
         "add": {"etc/slurm/plugstack.conf": PLUGSTACK_CONF}, "dirs": ["etc/slurm/plugstack.conf.d"]},
        {"name": "slurm-client", "desc": "Slurm client side commands", "files": ["usr/bin/s*"],
         "depends": [f"slurm-wlm-basic-plugins {same}", "munge", "ucf"]},
        {"name": "slurmd", "desc": "Slurm compute node daemon", "files": ["usr/sbin/slurmd", "usr/sbin/slurmstepd"],
         "depends": [f"slurm-wlm-basic-plugins {same}", "munge", "ucf", "init-system-helpers"],
         "unit": "slurmd.service", "add": {"etc/default/slurmd": DEFAULT_SLURMD},
         "dirs": ["var/lib/slurm/slurmd", "var/log/slurm"], "daemon": "slurmd"},
        {"name": "slurmctld", "desc": "Slurm central management daemon", "files": ["usr/sbin/slurmctld"],
         "depends": [f"slurm-wlm-basic-plugins {same}", f"slurm-client {same}", "munge", "ucf",
                     "init-system-helpers"],
         "unit": "slurmctld.service", "add": {"etc/default/slurmctld": DEFAULT_SLURMCTLD},
         "dirs": ["var/lib/slurm/slurmctld", "var/log/slurm"], "daemon": "slurmctld"},
        {"name": "slurm-wlm-mysql-plugin", "desc": "Slurm MySQL database support",
         "files": [f"{plug}/{p}" for p in MYSQL_PLUGINS], "depends": [f"slurm-wlm-basic-plugins {same}"]},
        {"name": "slurmdbd", "desc": "Secure enterprise-wide interface to a database for Slurm",
         "files": ["usr/sbin/slurmdbd"],
         "depends": [f"slurm-wlm-basic-plugins {same}", f"slurm-wlm-mysql-plugin {same}", "munge", "ucf"],
         "unit": "slurmdbd.service", "add": {"etc/default/slurmdbd": DEFAULT_SLURMDBD},
         "dirs": ["var/lib/slurm/slurmdbd", "var/log/slurm"], "daemon": "slurmdbd"},
        {"name": LIBSLURM_PACKAGE, "desc": "Runtime library files for Slurm", "files": [f"{lib}/libslurm.so.*"]},
        {"name": "libslurm-dev", "desc": "Slurm development files",
         "files": ["usr/include/slurm/*", f"{lib}/libslurm.so", f"{lib}/libslurm.a"],
         "depends": [f"{LIBSLURM_PACKAGE} {same}"]},
        {"name": "slurm-wlm", "desc": "Slurm Workload Manager", "files": [],
         "depends": [f"slurm-client {same}", f"slurmctld {same}", f"slurmd {same}"]},
    ]  # fmt: skip


# Installed by `make install` but in no package (no lane runs them; not in step 20's list).
UNPACKAGED = ("usr/sbin/sackd", "usr/bin/sview", "usr/share/*", "usr/lib/*/perl*",
              "usr/lib/*/*.la", "usr/lib/*/slurm-wlm/*.la", "usr/lib/*/slurm-wlm/*.a", "usr/lib/*/pkgconfig/*",
              "usr/lib/*/slurm-wlm/src/*", "usr/local/*")  # fmt: skip


def _select(stage: Path, globs: list[str]) -> list[Path]:
    return sorted({p for g in globs for p in stage.glob(g) if p.is_file() or p.is_symlink()})


def _files(stage: Path, spec: dict) -> list[Path]:
    """A package's files: its globs less its excludes (files another package takes)."""
    dropped = set(_select(stage, spec.get("exclude", [])))
    return [p for p in _select(stage, spec["files"]) if p not in dropped]


def unpackaged(stage: Path, trip: str) -> list[str]:
    """Files of the staging tree that no package takes and UNPACKAGED does not name."""
    taken = {p for spec in package_specs(trip) for p in _files(stage, spec)}
    skipped = set(_select(stage, list(UNPACKAGED))) | {p for g in UNPACKAGED for p in stage.glob(g + "/**/*")}
    left = [p for p in stage.rglob("*") if (p.is_file() or p.is_symlink()) and p not in taken | skipped]
    return sorted(str(p.relative_to(stage)) for p in left)


def _is_elf(f: Path) -> bool:
    if f.is_symlink():
        return False
    with open(f, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def _needed(files: list[Path]) -> set[str]:
    sonames: set[str] = set()
    for f in files:
        if not _is_elf(f):
            continue
        out = subprocess.run(["objdump", "-p", str(f)], capture_output=True, text=True).stdout
        sonames |= set(re.findall(r"^\s*NEEDED\s+(\S+)", out, re.M))
    return sonames


class _LibraryPackages:
    """soname -> `package (>= installed version)` on this machine (ldconfig, dpkg -S)."""

    def __init__(self) -> None:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
        self.paths = dict(re.findall(r"^\s*(\S+) \((?:libc6,)?x86-64[^)]*\) => (\S+)$", out, re.M))
        self.done: dict[str, str] = {}

    def depends(self, soname: str) -> str:
        if soname not in self.done:
            path = self.paths.get(soname)
            if path is None:
                raise SlurmBuildError(f"{soname}: no such library on this machine (ldconfig -p)")
            self.done[soname] = self._owner(path)
        return self.done[soname]

    @staticmethod
    def _owner(path: str) -> str:
        for candidate in dict.fromkeys([path, os.path.realpath(path), re.sub(r"^/usr/lib/", "/lib/", path)]):
            r = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
            if r.returncode == 0:
                pkg = r.stdout.split(":")[0].strip()
                version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                                         text=True).stdout.strip()  # fmt: skip
                return f"{pkg} (>= {version})"
        raise SlurmBuildError(f"{path}: no Debian package owns it (dpkg -S)")


def _lay_out(stage: Path, spec: dict, dest: Path, source: Path) -> list[Path]:
    files = _files(stage, spec)
    for f in files:
        target = dest / f.relative_to(stage)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target, follow_symlinks=False)
        if _is_elf(target):  # as Ubuntu's packages ship them: no debug sections
            subprocess.run(["strip", "--strip-unneeded", str(target)], check=True, capture_output=True)
    for rel, text in spec.get("add", {}).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    for rel in spec.get("dirs", []):
        (dest / rel).mkdir(parents=True, exist_ok=True)
    if "unit" in spec:
        units = dest / "lib/systemd/system"
        units.mkdir(parents=True, exist_ok=True)
        (units / spec["unit"]).write_text(unit(source, spec["unit"]))
    return files


def _control(dest: Path, spec: dict, depends: list[str], arch: str) -> None:
    debian = dest / "DEBIAN"
    debian.mkdir(parents=True, exist_ok=True)
    size_kib = sum(p.lstat().st_size for p in dest.rglob("*") if p.is_file()) // 1024 + 1
    fields = {
        "Package": spec["name"],
        "Source": "slurm-wlm",
        "Version": DEB_VERSION,
        "Architecture": arch,
        "Maintainer": "gpu-cluster local build <root@localhost>",
        "Installed-Size": str(size_kib),
        "Depends": ", ".join(depends),
        "Section": "admin",
        "Priority": "optional",
        "Homepage": "https://slurm.schedmd.com",
        "Description": f"{spec['desc']}\n Slurm {SLURM_VERSION} built from the release source, under Ubuntu 24.04's"
        " package name\n and paths, for the local lanes (localcluster/slurm_build.py).",
    }
    (debian / "control").write_text("".join(f"{k}: {v}\n" for k, v in fields.items() if v))
    etc = sorted("/" + str(p.relative_to(dest)) for p in (dest / "etc").rglob("*") if p.is_file())
    if etc:
        (debian / "conffiles").write_text("".join(f"{p}\n" for p in etc))
    scripts = dict(spec.get("scripts", {}))
    if "daemon" in spec:
        d = spec["daemon"]
        scripts |= {"postinst": daemon_postinst(d), "prerm": daemon_prerm(d), "postrm": daemon_postrm(d)}
    for name, body in scripts.items():
        (debian / name).write_text(body)
        (debian / name).chmod(0o755)


def package_all(stage: Path, source: Path, out: Path, log) -> list[Path]:
    """Every package of package_specs as a .deb in out."""
    trip = triplet()
    left = unpackaged(stage, trip)
    if left:
        raise SlurmBuildError(f"installed files no package takes (add them to a package or UNPACKAGED): {left[:10]}")
    arch = mirror_mod.deb_arch()
    libs = _LibraryPackages()
    own = {p.name for p in stage.rglob("*.so*")}
    debs = []
    for spec in package_specs(trip):
        dest = out / "trees" / spec["name"]
        files = _lay_out(stage, spec, dest, source)
        linked = sorted({libs.depends(s) for s in _needed(files) if s not in own})
        _control(dest, spec, list(dict.fromkeys([*spec.get("depends", []), *linked])), arch)
        deb = out / f"{spec['name']}_{DEB_VERSION}_{arch}.deb"
        _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(dest), str(deb)], log)
        debs.append(deb)
    shutil.rmtree(out / "trees")
    return debs


def build_debs(vendor: Path | None = None) -> list[Path]:
    """The .debs (cached by the build's key and this module's code)."""
    stage = build_stage(vendor)
    source = tarball(vendor)
    final = CACHE_ROOT / "slurm-debs" / hashlib.sha256(f"{stage.parent.name}{SOURCE_SHA256}".encode()).hexdigest()[:16]
    with _cached(final, f"packaging Slurm {SLURM_VERSION} under Ubuntu's names") as build:
        if build is not None:
            tmp, log = build
            package_all(stage, source, tmp, log)
    return sorted(final.glob("*.deb"))


def apt_repo(vendor: Path | None = None) -> apt_repo_mod.AptRepo:
    """The local apt repository `slurm-23.11` serving the packages."""
    return apt_repo_mod.build_repo(REPO_NAME, build_debs(vendor))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m localcluster.slurm_build", description=__doc__.split("\n\n")[0])
    ap.parse_args(argv)
    start = time.monotonic()
    try:
        repo = apt_repo()
    except (SlurmBuildError, mirror_mod.MirrorError, apt_repo_mod.AptRepoError) as err:
        print(f"slurm_build: {err}", file=sys.stderr)
        return 1
    for p in repo.packages:
        print(f"{p.name} {p.version} {repo.root / p.filename}")
    print(f"slurm_build: repository {repo.root} ready after {time.monotonic() - start:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
