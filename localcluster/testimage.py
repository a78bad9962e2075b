"""A tiny container image for the local cluster's container job (Pyxis + Enroot).

`srun --container-image=/fsx/images/test.sqsh` needs a squashfs root. A whole Debian
root is about 140 MB and Pyxis unpacks it once per node and job; this one holds only
bash and cat (with their libraries) from the lane's own root, plus an os-release that
names it, so a job's output proves it ran inside the image and not on the node.
Built with `mksquashfs` (squashfs-tools), cached next to the cluster's /fsx.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

# hostname: the gate's container step prints `container-ok $(hostname -s)` from inside.
PROGRAMS = ("/usr/bin/bash", "/usr/bin/cat", "/usr/bin/hostname")
IMAGE_NAME = "gpu-cluster test image"


def _os_name(base: Path) -> str:
    text = (base / "etc/os-release").read_text() if (base / "etc/os-release").exists() else ""
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.M)
    return m.group(1) if m else "unknown"


def _libraries(base: Path, program: str) -> list[str]:
    """Absolute paths (inside base) of the shared objects a program loads."""
    out = subprocess.run(
        ["chroot", str(base), "/usr/bin/ldd", program], check=True, capture_output=True, text=True
    ).stdout
    libs = []
    for line in out.splitlines():
        m = re.search(r"(/\S+) \(0x", line)  # "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)"
        if m:
            libs.append(m.group(1))
    return libs


def _copy_in(base: Path, tree: Path, path: str) -> None:
    # usr-merged layout: /lib and /bin are symlinks into /usr in the tree as in the base.
    rel = path.lstrip("/")
    for top in ("lib64", "lib", "bin"):
        if rel.startswith(top + "/"):
            rel = "usr/" + rel
    dest = tree / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2((base / path.lstrip("/")).resolve(), dest)


def build_tree(base: Path, tree: Path) -> None:
    for d in ("usr/bin", "usr/lib", "usr/lib64", "etc", "proc", "sys", "dev", "tmp", "run", "root", "fsx"):
        (tree / d).mkdir(parents=True, exist_ok=True)
    for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        (tree / link).symlink_to(target)
    (tree / "tmp").chmod(0o1777)
    for prog in PROGRAMS:
        _copy_in(base, tree, prog)
        for lib in _libraries(base, prog):
            _copy_in(base, tree, lib)
    (tree / "usr/bin/sh").symlink_to("bash")
    (tree / "etc/os-release").write_text(
        f'NAME="{IMAGE_NAME}"\nID=gpu-cluster-test\nPRETTY_NAME="{IMAGE_NAME} (bash and cat from {_os_name(base)})"\n'
    )
    (tree / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (tree / "etc/group").write_text("root:x:0:\n")


def build(base: Path, dest: Path) -> Path:
    """dest (a .sqsh file) from base's programs; kept if it already exists."""
    if dest.exists():
        return dest
    if shutil.which("mksquashfs") is None:
        raise RuntimeError("mksquashfs not found: apt-get install squashfs-tools")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gcl-image-") as tmp:
        tree = Path(tmp) / "root"
        build_tree(base, tree)
        part = dest.with_suffix(".part")
        subprocess.run(
            ["mksquashfs", str(tree), str(part), "-noappend", "-all-root", "-quiet"],
            check=True,
            capture_output=True,
            text=True,
        )
        part.rename(dest)
    return dest
