"""A security-style library upgrade for a running lane machine: two libraries the daemons
map (munged: libbz2; slurmd: libnuma), rebuilt under a newer version with every other
binary package of their sources the root has installed (bzip2; libnuma-dev), as a
security update of a source ships them all (apt_repo.rebuild_with_version: the same files,
so dpkg replaces them on disk while the daemons keep the old ones mapped), taken from the
lanes' own .deb cache at the versions the root has, and served from a local apt repository."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from localcluster import apt_repo, images

# library package -> the daemon that maps it, the systemd unit that runs that daemon, and
# the library file's name as /proc/<pid>/maps shows it
LIBRARIES = {
    "libbz2-1.0": ("munged", "munge.service", "libbz2.so.1.0"),
    "libnuma1": ("slurmd", "slurmd.service", "libnuma.so.1"),
}
# Ubuntu 24.04's needrestart restarts what it finds after every APT run, non-interactive
# ones (unattended-upgrades) included [NR-NOBLE]; Debian's 3.6 does that with this setting.
UBUNTU_NOBLE_NEEDRESTART = (
    "# Ubuntu 24.04's needrestart mode [NR-NOBLE]: restart automatically, also when run\n"
    "# non-interactively by unattended-upgrades (Debian's default only lists).\n"
    "$nrconf{restart} = 'a';\n"
)
UBUNTU_NOBLE_NEEDRESTART_PATH = "/etc/needrestart/conf.d/10-ubuntu-noble-restart.conf"


def installed(root: Path, package: str) -> tuple[str, str]:
    """(version, architecture) of `package` in the root's dpkg database."""
    r = subprocess.run(
        ["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f=${Version} ${Architecture}", package],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0 or not r.stdout.strip():
        raise LookupError(f"{root}: {package} is not installed ({r.stderr.strip()})")
    version, arch = r.stdout.split()
    return version, arch


def archive_deb(root: Path, suite: str, package: str) -> Path:
    """The archive's .deb of the version the root has, from the lanes' .deb cache (the
    base and the bake download through it)."""
    version, arch = installed(root, package)
    deb = images.CACHE_ROOT / "debs" / suite / f"{package}_{version.split(':')[-1]}_{arch}.deb"
    if not deb.is_file():
        raise FileNotFoundError(f"{deb}: not in the lanes' .deb cache (rebuild the lane's base to fetch it)")
    return deb


def source_packages(root: Path, package: str) -> list[str]:
    """Every package the root has installed from `package`'s source, `package` first."""
    r = subprocess.run(
        [
            "dpkg-query",
            f"--admindir={root}/var/lib/dpkg",
            "-W",
            "-f=${db:Status-Abbrev}|${Package}|${source:Package}\n",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line.split("|") for line in r.stdout.splitlines()]
    source = next(src for _, pkg, src in rows if pkg == package)
    return [package] + sorted(pkg for st, pkg, src in rows if src == source and pkg != package and st.strip() == "ii")


def upgrade_repo(root: Path, suite: str, n: int) -> apt_repo.AptRepo:
    """Repository `upgrade-<n>`: the packages of every library's source at `<installed>+gcl<n>`."""
    with tempfile.TemporaryDirectory(prefix="gcl-upgrade-") as tmp:
        debs = []
        for lib in LIBRARIES:
            family = source_packages(root, lib)
            for p in family:
                debs.append(apt_repo.rebuild_with_version(archive_deb(root, suite, p), f"+gcl{n}", Path(tmp), family))
        return apt_repo.build_repo(f"upgrade-{n}", debs)


def origins_pattern(repos: list[apt_repo.AptRepo]) -> str:
    """An apt.conf.d snippet letting unattended-upgrades install from these repositories
    only: they play the archive's security pocket, which a lane machine cannot reach (its
    entries are cleared, or the job would stop at the first download it cannot make)."""
    allowed = "".join(f'  "origin={r.name}";\n' for r in repos)
    return (
        "#clear Unattended-Upgrade::Origins-Pattern;\n#clear Unattended-Upgrade::Allowed-Origins;\n"
        f"Unattended-Upgrade::Origins-Pattern {{\n{allowed}}};\n"
    )
