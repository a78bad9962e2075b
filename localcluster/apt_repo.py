"""A local apt repository built from .deb files, served to the lanes' roots and machines.

The lanes install packages through apt exactly as a node does (step 20's `apt-get
install`, an `apt-get upgrade` on a running machine); when the packages are ours (Slurm
23.11 under Ubuntu's names, a re-versioned library for an upgrade test), they come from
a repository built here:
- a flat repository [DEBIAN-REPO] (one directory: the .debs, `Packages`, `Packages.gz`
  and `Release`), with each package's stanza taken from its own control file plus
  Filename, Size, MD5sum, SHA1 and SHA256, and `Release` listing the Packages files
  with their sizes and hashes, so apt checks Release -> Packages -> .deb as it does
  against an archive (a changed .deb is a "Hash Sum mismatch");
- unsigned, named `[trusted=yes]` in its sources entry [SOURCES-LIST]. A throwaway key
  would be generated on the same machine that serves the files and installed in the
  same roots that read them: it would prove nothing the read-only bind does not, and
  every key rotation would change the roots' inputs. `trusted=yes` skips only the
  signature; the hash chain above is still checked (tests/localcluster/test_apt_repo.py
  corrupts a .deb and sees apt refuse it);
- byte-stable: stanzas in (package, version) order, a fixed Release date, gzip without
  a timestamp, so the same .debs give the same directory and the same cache key;
- cached under /var/cache/gpu-cluster/apt/<name>-<hash of the .debs and this module>,
  built in a temp dir beside it and renamed, like the mirror and the roots;
- served read-only at MOUNT_ROOT/<name> inside a root during its bake and inside each
  lane machine (an nspawn `--bind-ro`), the way the lanes serve the Enroot/Pyxis mirror;
  `apt_files()` is what a root needs to use it (the sources entry and, when a version
  must win over the archive's, an apt preferences pin on the repository's label).

`rebuild_with_version()` makes the package an upgrade test serves: an archive .deb
unpacked (`dpkg-deb -R`) and built again with only its Version raised, as a binary-only
rebuild (a binNMU, or a security rebuild) is: the same files, a newer version, so dpkg
replaces each file on disk and every running process still maps the old one.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from localcluster import mirror as mirror_mod

CACHE_ROOT = mirror_mod.CACHE_ROOT
SOURCE_SHA256 = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
# Where a root or machine sees the repository named <name>.
MOUNT_ROOT = "/mnt/gpu-cluster-apt"
# apt refuses a Release dated in the future (Acquire::Check-Date); a fixed past date keeps
# the file byte-stable. There is no Valid-Until, so it never expires.
RELEASE_DATE = "Sat, 01 Jan 2000 00:00:00 UTC"
# Control fields apt computes or we add; a .deb's own control file never carries them.
_ADDED = ("Filename", "Size", "MD5sum", "SHA1", "SHA256")


class AptRepoError(RuntimeError):
    pass


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    architecture: str
    filename: str


@dataclass(frozen=True)
class AptRepo:
    name: str
    root: Path  # host directory: the .debs, Packages, Packages.gz, Release
    packages: tuple[Package, ...]

    @property
    def mount_point(self) -> str:
        return f"{MOUNT_ROOT}/{self.name}"

    @property
    def label(self) -> str:
        return f"gpu-cluster-{self.name}"

    def source_line(self) -> str:
        return f"deb [trusted=yes] file:{self.mount_point} ./\n"

    def bind(self) -> tuple[str, str]:
        """(host path, path inside the root or machine), to bind read-only."""
        return str(self.root), self.mount_point

    def apt_files(self, pin_priority: int | None = None) -> dict[str, bytes]:
        """The files a root needs to install from this repository: its sources entry and,
        with `pin_priority`, a preferences pin on its Release label (1001 lets its
        versions win even over a newer one in the archive)."""
        files = {f"/etc/apt/sources.list.d/{self.label}.list": self.source_line().encode()}
        if pin_priority is not None:
            pin = f"Package: *\nPin: release l={self.label}\nPin-Priority: {pin_priority}\n"
            # apt reads only preferences.d files without an extension or ending in .pref;
            # "gpu-cluster-slurm-23.11" would have the extension "11" and be ignored.
            files[f"/etc/apt/preferences.d/{self.label}.pref"] = pin.encode()
        return files

    def version_of(self, package: str) -> str:
        found = [p.version for p in self.packages if p.name == package]
        if not found:
            raise AptRepoError(f"{self.name}: no package {package}")
        return found[0]


def _sha256_file(path: Path) -> str:
    return mirror_mod.sha256_file(path)


def control_fields(deb: Path) -> list[tuple[str, str]]:
    """The .deb's control file as (field, value) pairs, continuation lines kept."""
    r = subprocess.run(["dpkg-deb", "--field", str(deb)], capture_output=True, text=True)
    if r.returncode != 0:
        raise AptRepoError(f"{deb}: not a readable .deb: {r.stderr.strip() or r.returncode}")
    fields: list[tuple[str, str]] = []
    for line in r.stdout.splitlines():
        if line[:1] in (" ", "\t") and fields:
            fields[-1] = (fields[-1][0], fields[-1][1] + "\n" + line)
        elif ":" in line:
            key, _, value = line.partition(":")
            fields.append((key, value.strip()))
    names = {k for k, _ in fields}
    missing = [k for k in ("Package", "Version", "Architecture") if k not in names]
    if missing:
        raise AptRepoError(f"{deb}: control file lacks {', '.join(missing)}")
    return [(k, v) for k, v in fields if k not in _ADDED]


def stanza(deb: Path, filename: str) -> str:
    data = deb.read_bytes()
    fields = control_fields(deb) + [
        ("Filename", filename),
        ("Size", str(len(data))),
        ("MD5sum", hashlib.md5(data).hexdigest()),
        ("SHA1", hashlib.sha1(data).hexdigest()),
        ("SHA256", hashlib.sha256(data).hexdigest()),
    ]
    return "".join(f"{k}: {v}\n" for k, v in fields)


def release_text(name: str, architectures: list[str], index: dict[str, bytes]) -> str:
    """A flat repository's Release: what it is and the hash of every index file."""
    lines = [
        f"Origin: {name}",
        f"Label: gpu-cluster-{name}",
        f"Date: {RELEASE_DATE}",
        f"Architectures: {' '.join(architectures)}",
        f"Description: gpu-cluster local repository {name} (built from local .debs)",
    ]
    for title, algo in (("MD5Sum", hashlib.md5), ("SHA1", hashlib.sha1), ("SHA256", hashlib.sha256)):
        lines.append(f"{title}:")
        lines += [f" {algo(data).hexdigest()} {len(data)} {path}" for path, data in sorted(index.items())]
    return "\n".join(lines) + "\n"


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def write_repo(name: str, debs: list[Path], dest: Path) -> tuple[Package, ...]:
    """Copy the .debs into dest and write Packages, Packages.gz and Release next to them."""
    entries = []
    for deb in debs:
        fields = dict(control_fields(deb))
        entries.append(((fields["Package"], fields["Version"], fields["Architecture"]), deb))
    keys = [k for k, _ in entries]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise AptRepoError(f"{name}: the same package twice: {', '.join('_'.join(d) for d in dupes)}")
    packages, text = [], ""
    for (pkg, version, arch), deb in sorted(entries, key=lambda e: e[0]):
        filename = f"{pkg}_{version.split(':')[-1]}_{arch}.deb"
        shutil.copyfile(deb, dest / filename)
        text += ("\n" if text else "") + stanza(dest / filename, filename)
        packages.append(Package(pkg, version, arch, filename))
    index = {"Packages": text.encode(), "Packages.gz": _gzip(text.encode())}
    for path, data in index.items():
        (dest / path).write_bytes(data)
    archs = sorted({p.architecture for p in packages} - {"all"}) or ["all"]
    (dest / "Release").write_text(release_text(name, archs, index))
    return tuple(packages)


# Control fields naming other packages: a rebuild moves exact pins on its siblings along.
_RELATIONS = ("Depends", "Pre-Depends", "Recommends", "Suggests", "Breaks", "Conflicts", "Replaces", "Provides")


def rebuild_with_version(deb: Path, suffix: str, dest: Path, siblings: Iterable[str] = ()) -> Path:
    """`deb` built again as version `<its version><suffix>` into `dest` (same files, same
    control fields but Version); refuses a suffix that does not make a newer version.

    `siblings`: the other binary packages of its source rebuilt with it (a binNMU rebuilds
    them all): a relation pinning one of them to this package's old version exactly
    (libnuma-dev: `libnuma1 (= 2.0.16-1)`) is moved to the new one, as the rebuild's
    `${binary:Version}` would; apt could not upgrade one without the other otherwise."""
    if not suffix or not all(c.isalnum() or c in "+.~" for c in suffix):
        raise AptRepoError(f"version suffix {suffix!r}: use letters, digits, '+', '.' or '~'")
    fields = dict(control_fields(deb))
    old, new = fields["Version"], fields["Version"] + suffix
    newer = subprocess.run(["dpkg", "--compare-versions", new, "gt", old], capture_output=True)
    if newer.returncode != 0:
        raise AptRepoError(f"{deb.name}: {new} is not newer than {old}")
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / f"{fields['Package']}_{new.split(':')[-1]}_{fields['Architecture']}.deb"
    with tempfile.TemporaryDirectory(prefix="rebuild-", dir=dest) as tmp:
        tree = Path(tmp) / "tree"
        _dpkg_deb(["-R", str(deb), str(tree)], deb)
        control = tree / "DEBIAN" / "control"
        stamp = control.stat().st_mtime_ns
        lines = control.read_text().splitlines(keepends=True)
        pins = [re.compile(rf"(?<![\w.+-])({re.escape(p)}(?::[\w-]+)?) \(= {re.escape(old)}\)") for p in siblings]
        rewritten = []
        for ln in lines:
            if ln.startswith("Version:"):
                ln = f"Version: {new}\n"
            elif ln.split(":", 1)[0] in _RELATIONS:
                for pin in pins:
                    ln = pin.sub(rf"\1 (= {new})", ln)
            rewritten.append(ln)
        control.write_text("".join(rewritten))
        # Byte-stable: the control file keeps its time, the archive members take it too.
        os.utime(control, ns=(stamp, stamp))
        epoch = {"SOURCE_DATE_EPOCH": str(stamp // 10**9)}
        # As root the files keep their owners; an ordinary user's extraction made them its own.
        owners = [] if os.geteuid() == 0 else ["--root-owner-group"]
        _dpkg_deb([*owners, "-Zxz", "--build", str(tree), str(out)], deb, env=epoch)
    return out


def _dpkg_deb(args: list[str], deb: Path, env: dict[str, str] | None = None) -> None:
    r = subprocess.run(["dpkg-deb", *args], capture_output=True, text=True, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        raise AptRepoError(f"{deb.name}: `dpkg-deb {' '.join(args)}` failed: {r.stderr.strip()}")


def repo_key(name: str, debs: list[Path]) -> str:
    h = hashlib.sha256()
    for part in (SOURCE_SHA256, name, *sorted(f"{d.name}={_sha256_file(d)}" for d in debs)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def read_repo(name: str, root: Path) -> AptRepo:
    """An already built repository, from its Packages file."""
    packages = []
    for block in (root / "Packages").read_text().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and line[0] != " ")
        if fields:
            packages.append(Package(fields["Package"], fields["Version"], fields["Architecture"], fields["Filename"]))
    return AptRepo(name, root, tuple(packages))


def build_repo(name: str, debs: Iterable[Path], cache: Path | None = None) -> AptRepo:
    """The repository of these .debs (built once per set of inputs; cached)."""
    if not name or not all(c.isalnum() or c in ".-_" for c in name):
        raise AptRepoError(f"repository name {name!r}: use letters, digits, '.', '-' or '_'")
    debs = [Path(d) for d in debs]
    if not debs:
        raise AptRepoError(f"{name}: no .deb files given")
    missing = [str(d) for d in debs if not d.is_file()]
    if missing:
        raise AptRepoError(f"{name}: not found: {', '.join(missing)}")
    cache = cache or CACHE_ROOT / "apt"
    final = cache / f"{name}-{repo_key(name, debs)}"
    if final.is_dir():
        return read_repo(name, final)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".build-{name}-", dir=cache))
    try:
        write_repo(name, debs, tmp)
        tmp.chmod(0o755)
        try:
            os.rename(tmp, final)
        except OSError:  # a concurrent build of the same inputs finished first
            if not final.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return read_repo(name, final)


def attach(hostname: str, leader_pid: int, repo: AptRepo, pin_priority: int | None = None) -> None:
    """Serve a repository to a running lane machine: bind it read-only at its mount point
    and write its apt files there (the machine's next `apt-get update` reads it)."""
    from localcluster import machine

    machine.bind_into(hostname, leader_pid, repo.root, repo.mount_point)
    script = (
        'mount -o remount,bind,ro "$1"; shift; while (($#)); do mkdir -p "${1%/*}"; printf %s "$2" >"$1"; shift 2; done'
    )
    files = [a for path, data in repo.apt_files(pin_priority).items() for a in (path, data.decode())]
    r = subprocess.run(
        [*machine.nsenter_argv(leader_pid), "bash", "-c", script, "attach", repo.mount_point, *files],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise AptRepoError(f"{hostname}: could not serve {repo.name} at {repo.mount_point}: {r.stderr.strip()}")
