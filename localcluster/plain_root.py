"""A plain root: to a lane's baked root what a plain DLAMI is to a baked AMI.

The same debootstrap base and the same node files and lane swaps as the baked root
(images.py stages 1-3), but no bake: no Slurm, munge, PMIx, Enroot, Pyxis or boto3, and
no manifest. A machine booted from it runs step 20's install path at boot, as a node on
a plain DLAMI does: apt installs Slurm, munge and PMIx, Enroot's .debs and Pyxis's
source come through the download-and-verify path, Pyxis is compiled, boto3's wheels are
installed. It exists to measure that path against the baked one
(bench/bench_localcluster.py --image plain).

A lane machine cannot reach the archive, so its apt reads a local copy instead (the one
swap this root adds to the baked root's, like the Enroot/Pyxis mirror standing in for
GitHub): a flat repository (apt_repo.py) of every .deb in the lanes' cache for the
suite, which holds what the base and the bakes downloaded from the archive. The root's
sources name only that repository (and, on a lane that has one, the lane's own pinned
repository, slurm2311's Slurm 23.11); machines get them, and the mirror, bound read-only.

Cached under /var/cache/gpu-cluster/roots/<lane>-plain-<hash>, keyed like a baked root
(base, mirror, lane settings, payload, this module) plus the repository.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from localcluster import apt_repo, images
from localcluster import mirror as mirror_mod

SOURCE_SHA256 = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
ARCHIVE_SOURCES = "etc/apt/sources.list.d/debian.sources"


def archive_repo(lane: str) -> apt_repo.AptRepo:
    """Every .deb the lanes downloaded for the lane's suite, as a local repository."""
    suite = images.LANES[lane].suite
    debs = sorted((images.CACHE_ROOT / "debs" / suite).glob("*.deb"))
    if not debs:
        raise images.ImageBuildError(f"no .debs cached for {suite}: build the lane's baked root first")
    return apt_repo.build_repo(f"archive-{suite}", debs)


def binds(lane: str) -> list[tuple[str, str]]:
    """(host path, path inside) to bind read-only into a machine booted from the plain root."""
    return [archive_repo(lane).bind(), (str(mirror_mod.build_mirror().root), images.MIRROR_MOUNT)]


def build(lane: str) -> Path:
    """The lane's plain root (cached by the hash of its inputs); treat it as read-only."""
    ln = images.LANES[lane]
    base = images.build_base(ln)
    mirror = mirror_mod.build_mirror()
    repo = archive_repo(lane)
    # A lane with its own repository (slurm2311: the nodes' Slurm built here) keeps it, pinned
    # as in the baked root, so step 20 installs that Slurm at boot rather than the archive's.
    own = images.local_repo(ln)
    files = {**images.default_payload(), **(own.apt_files(images.LOCAL_REPO_PIN) if own else {})}
    settings = images.lane_settings(ln, mirror)
    root_key = images._root_key(ln, base, mirror, settings, files, own.root.name if own else "")
    key = hashlib.sha256("\0".join((root_key, repo.root.name, SOURCE_SHA256)).encode()).hexdigest()[:16]
    final = images.CACHE_ROOT / "roots" / f"{lane}-plain-{key}"
    if final.is_dir():
        return final
    with images._cached_build(final, "root", f"plain root {lane}") as build:
        if build is not None:
            st, tmp = build
            images.seed_tree(st, base, tmp, files, settings)
            with st.run("archive"):
                (tmp / ARCHIVE_SOURCES).unlink(missing_ok=True)
                images.lay_down(tmp, repo.apt_files())
                (tmp / images.MIRROR_MOUNT.lstrip("/")).mkdir(parents=True, exist_ok=True)
            with st.run("clean"):
                images._chroot_out(
                    tmp, "useradd", "--create-home", "--uid", str(images.ORDINARY_UID), "--shell", "/bin/bash",
                    images.ORDINARY_USER,
                )  # fmt: skip
                (tmp / "etc/machine-id").write_text("")
                (tmp / "etc/hostname").write_text("localhost\n")
                record = {
                    "lane": lane,
                    "image": "plain",
                    "key": key,
                    "base": base.name,
                    "archive": repo.root.name,
                    # bound at launch like the baked root's (images.apt_repo_binds)
                    "apt_repos": {own.mount_point: str(own.root)} if own else {},
                }
                dest = tmp / images.LANE_RECORD.lstrip("/")
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return final
