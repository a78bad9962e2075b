"""Build small .debs and run apt against a repository as an ordinary process (no root, no
chroot): apt's state, cache and sources all in a temp directory."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def missing_tools() -> str | None:
    for tool in ("dpkg-deb", "apt-get", "apt-cache"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian's dpkg and apt)"
    return None


def make_deb(out: Path, package: str, version: str, arch: str = "all", depends: str = "", payload: str = "") -> Path:
    stage = out / f"stage-{package}-{version}"
    (stage / "DEBIAN").mkdir(parents=True)
    (stage / "usr/share" / package).mkdir(parents=True)
    (stage / "usr/share" / package / "version").write_text(payload or version)
    control = f"Package: {package}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: test <t@localhost>\n"
    control += (f"Depends: {depends}\n" if depends else "") + "Description: test package\n a second line\n"
    (stage / "DEBIAN/control").write_text(control)
    deb = out / f"{package}_{version}_{arch}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(stage), str(deb)],
                   check=True, capture_output=True)  # fmt: skip
    return deb


class AptBox:
    """apt-get/apt-cache with every directory redirected under `root`."""

    def __init__(self, root: Path, sources: str, preferences: str = ""):
        self.root = root
        for d in ("lists/partial", "cache/archives/partial", "parts", "download"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "sources.list").write_text(sources)
        (root / "status").write_text("")
        (root / "preferences").write_text(preferences)

    def options(self) -> list[str]:
        r = self.root
        return [
            f"-oDir::Etc::SourceList={r}/sources.list",
            f"-oDir::Etc::SourceParts={r}/parts",
            f"-oDir::State={r}",
            f"-oDir::State::Lists={r}/lists",
            f"-oDir::State::status={r}/status",
            f"-oDir::Cache={r}/cache",
            f"-oDir::Etc::Preferences={r}/preferences",
            f"-oDir::Etc::PreferencesParts={r}/parts",
            "-oDebug::NoLocking=1",
            "-oAPT::Sandbox::User=root",
        ]

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([tool, *self.options(), *args], capture_output=True, text=True,
                              cwd=self.root / "download")  # fmt: skip
