#!/usr/bin/python3
"""gpu-cluster-bake: a node image's manifest, written when the image is baked and
checked by step 20 when a node boots from it (docs/images.md, "Baking a node image").

    gpu-cluster-bake kernel             the image's own kernel (what it boots), or nothing
    gpu-cluster-bake lustre-module K    the Lustre client module built for kernel K, or why not
    gpu-cluster-bake record             bake mode, after step 20 installed: check every pin,
                                        the Lustre module, holds and drop-ins; write the manifest
    gpu-cluster-bake verify             a node on a baked image: what is installed against the
                                        manifest and this stack's pins (no apt, no download)
    gpu-cluster-bake clean              the bake's own node state and logs, before the capture
    gpu-cluster-bake result             one line for the bake driver (the console of an EC2
                                        build instance): GPU_CLUSTER_BAKE_RESULT {...}

A bake is `GPU_CLUSTER_BAKE=1 gpu-cluster-boot --only packages`: the very step 20 every
node runs installs everything, then calls `record`. The manifest
(/var/lib/gpu-cluster-image/manifest.json, sorted JSON) holds the package versions, the
kernel, the download digests, the drop-ins' digests and the pins it was baked for;
manifest.json.sha256 beside it is its sha256 (sha256sum format), which `ops status`
shows per node and the AMI's tags carry (`image_tags`).

Settings come from the environment step 20 runs in (cluster.env, overrides.env):
SLURM_SERIES, ENROOT_VERSION, PYXIS_VERSION, DOWNLOAD_SHA256, DOWNLOAD_RECORD, PYXIS_SO,
CLOUDWATCH_AGENT_VERSION, CLOUDWATCH_SKIP (the lanes: recorded as skipped),
GPU_CLUSTER_FSX, NEEDRESTART_DROPIN, UNATTENDED_UPGRADES_DROPIN, NODE_TEMPLATES.
GPU_CLUSTER_IMAGE_ROOT (tests) is the directory standing in for `/` when files are read.
Exit status: 0 ok, 1 a check failed (one line on stderr: what, and what to do), 2 usage.
Stdlib only: nodes run it with the system Python (also imported by ops and the lanes).
"""

import fnmatch
import hashlib
import json
import os
import re
import subprocess
import sys
import time

# userdata/layout.py IMAGE_MANIFEST; cluster.env's IMAGE_MANIFEST wins.
MANIFEST = "/var/lib/gpu-cluster-image/manifest.json"
FORMAT = 1
RESULT_MARK = "GPU_CLUSTER_BAKE_RESULT"
FAILED_MARK = "GPU_CLUSTER_BAKE_FAILED"
PIN_KEYS = (
    "SLURM_SERIES",
    "ENROOT_VERSION",
    "PYXIS_VERSION",
    "DOWNLOAD_SHA256",
    "CLOUDWATCH_AGENT_VERSION",
    "CLOUDWATCH_SKIP",
)
CLOUDWATCH_AGENT_PACKAGE = "amazon-cloudwatch-agent"
SKIPPED = "skipped"  # the CloudWatch agent's version in a root baked with CLOUDWATCH_SKIP (the lanes)
RECORD = "record"  # model/pins.py: no digest could be read when pinned
# What must stay as baked on a running cluster (step 20 holds these: its HOLD_PATTERNS):
# the kernel the Lustre module is built for, the Lustre client, Slurm with PMIx, munge.
MUST_HOLD = ("slurm*", "libslurm*", "libpmix*", "munge", "libmunge*", "lustre-client-*")
SLURM_PACKAGES = ("slurm-wlm", "slurmd", "slurmctld", "slurm-client")
MODULE_NAMES = ("lustre.ko", "lustre.ko.zst", "lustre.ko.xz", "lustre.ko.gz")
LANE_KERNEL_NOTE = "none: the image has no kernel of its own (/boot/vmlinuz-*)"
# The image tags: one per key version, the manifest digest, one per download digest.
TAG_PREFIX = "GpuClusterImage"
DOWNLOAD_TAG_PREFIX = "GpuClusterDownload:"
TAGGED_VERSIONS = ("kernel", "slurm", "enroot", "pyxis", "lustre", "munge", "pmix", "cwagent")
MAX_TAGS, MAX_KEY, MAX_VALUE = 50, 128, 256  # per AMI [AWS-TAGS]


class BakeError(Exception):
    """A check that failed: one line naming what and what to do."""


def manifest_path() -> str:
    return os.environ.get("IMAGE_MANIFEST") or MANIFEST


def root_path(path: str, root: str | None = None) -> str:
    return (os.environ.get("GPU_CLUSTER_IMAGE_ROOT", "") if root is None else root).rstrip("/") + path


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _version_key(name: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


# --- the kernel and its Lustre module ---------------------------------------------------


def image_kernel() -> str | None:
    """The kernel the image boots: the newest /boot/vmlinuz-<release> (GRUB's default on
    Ubuntu is the newest installed kernel). None: the root has no kernel (a lane root:
    systemd-nspawn machines run the host's)."""
    boot = root_path("/boot")
    names = [n[len("vmlinuz-") :] for n in _listdir(boot) if n.startswith("vmlinuz-")]
    return max(names, key=_version_key) if names else None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def lustre_module(kernel: str) -> tuple[str, str]:
    """(path, vermagic) of the Lustre client module built for `kernel`; BakeError naming
    what is missing. The module must be in that kernel's tree AND say it was built for
    it (vermagic): a module of another kernel does not load."""
    tree = root_path(f"/lib/modules/{kernel}")
    if not os.path.isdir(tree):
        raise BakeError(f"no module tree {tree} for kernel {kernel}: the image's kernel has no modules installed")
    found = sorted(os.path.join(d, f) for d, _, files in os.walk(tree) for f in files if f in MODULE_NAMES)
    if not found:
        raise BakeError(
            f"no Lustre client module for kernel {kernel} (no lustre.ko under {tree}): FSx's client "
            f"repository has no lustre-client-modules-{kernel} yet, or it was not installed; bake from an "
            "image whose kernel has one, or wait for FSx's client for this kernel"
        )
    try:
        out = subprocess.run(
            ["modinfo", "-F", "vermagic", found[0]], capture_output=True, text=True, timeout=30, check=False
        )
    except FileNotFoundError:
        raise BakeError("modinfo not found (package kmod): cannot read the Lustre module's vermagic") from None
    vermagic = out.stdout.strip()
    if out.returncode != 0 or vermagic.split()[:1] != [kernel]:
        raise BakeError(
            f"{found[0]} was built for kernel '{vermagic.split()[0] if vermagic else '?'}', not {kernel} "
            f"(modinfo -F vermagic): it would not load; install lustre-client-modules-{kernel}"
        )
    return found[0][len(root_path("")) :] or found[0], vermagic


# --- what is installed --------------------------------------------------------------------


def installed() -> dict[str, tuple[str, bool]]:
    """Every installed package: name -> (version, held)."""
    out = _run(["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Package} ${Version}\n"])
    pkgs = {}
    for line in out.splitlines():
        w = line.split()
        if len(w) == 3 and w[0] in ("ii", "hi"):
            pkgs[w[1]] = (w[2], w[0] == "hi")
    return pkgs


def _run(argv: list[str]) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except FileNotFoundError:
        raise BakeError(f"{argv[0]} not found on PATH") from None
    if r.returncode != 0:
        raise BakeError(f"`{' '.join(argv)}` failed with status {r.returncode}: {r.stderr.strip()[-200:]}")
    return r.stdout


def pins_from_env() -> dict[str, str]:
    return {k: os.environ.get(k, "") for k in PIN_KEYS}


def download_pins(value: str) -> dict[str, str]:
    """DOWNLOAD_SHA256 (`file=digest` words) as a mapping."""
    return dict(w.split("=", 1) for w in value.split() if "=" in w)


def pin_problems(recorded: dict, pins: dict[str, str]) -> list[str]:
    """What a baked image (its manifest, or the same fields read back from its tags)
    lacks for these pins. The one rule for step 20 on a node, `ops preflight` and
    `ops status`: same Slurm series, Enroot and Pyxis versions; each pinned digest
    equal to what the bake downloaded; a `record` pin needs a recorded digest."""
    versions, downloads = recorded.get("versions", {}), recorded.get("downloads", {})
    out = []
    series = pins.get("SLURM_SERIES", "")
    if not str(versions.get("slurm", "")).startswith(series + "."):
        out.append(f"Slurm {versions.get('slurm')} is not of the pinned series {series}")
    for key, name in (("ENROOT_VERSION", "enroot"), ("PYXIS_VERSION", "pyxis")):
        if versions.get(name) != pins.get(key):
            out.append(f"{name.capitalize()} {versions.get(name)} is not the pinned {pins.get(key)}")
    agent = SKIPPED if pins.get("CLOUDWATCH_SKIP") else pins.get("CLOUDWATCH_AGENT_VERSION", "")
    if agent and versions.get("cwagent") != agent:
        out.append(f"CloudWatch agent {versions.get('cwagent')} is not the pinned {agent}")
    for file, want in download_pins(pins.get("DOWNLOAD_SHA256", "")).items():
        got = downloads.get(file)
        if got is None:
            out.append(f"{file} was not downloaded by the bake (pinned {want})")
        elif want != RECORD and got != want:
            out.append(f"{file} baked with sha256 {got}, pinned {want}")
    return out


# --- bake: check everything, then the manifest --------------------------------------------


def _env(key: str) -> str:
    value = os.environ.get(key, "")
    if not value:
        raise BakeError(f"{key} is not set (cluster.env): run through gpu-cluster-boot, which loads it")
    return value


def _check_packages(pkgs: dict[str, tuple[str, bool]]) -> dict[str, str]:
    series = _env("SLURM_SERIES")
    for p in SLURM_PACKAGES:
        v = pkgs.get(p, ("not installed",))[0]
        if not v.startswith(series + "."):
            raise BakeError(f"{p} is '{v}', need Slurm {series}: the bake must install the pinned series")
    if "munge" not in pkgs:
        raise BakeError("munge is not installed")
    pmix = sorted(p for p in pkgs if re.fullmatch(r"libpmix2(t64)?", p))
    if not pmix:
        raise BakeError("libpmix2 is not installed: srun --mpi=pmix cannot load the PMIx library")
    enroot = _run(["enroot", "version"]).strip()
    if enroot != _env("ENROOT_VERSION"):
        raise BakeError(f"enroot version is '{enroot}', need {_env('ENROOT_VERSION')}")
    so = _env("PYXIS_SO")
    stamp = _read(root_path(so + ".version")).strip()
    if not os.path.isfile(root_path(so)) or stamp != _env("PYXIS_VERSION"):
        raise BakeError(f"Pyxis at {so} is '{stamp or 'missing'}', need {_env('PYXIS_VERSION')}")
    return {
        "slurm": pkgs["slurmd"][0],
        "munge": pkgs["munge"][0],
        "pmix": pkgs[pmix[0]][0],
        "enroot": enroot,
        "pyxis": stamp,
        "cwagent": _cloudwatch_agent(pkgs),
    }


def _cloudwatch_agent(pkgs: dict[str, tuple[str, bool]]) -> str:
    """The agent's pinned version (the package is `<version>-1`), or SKIPPED."""
    if os.environ.get("CLOUDWATCH_SKIP"):
        return SKIPPED
    want = _env("CLOUDWATCH_AGENT_VERSION")
    have = pkgs.get(CLOUDWATCH_AGENT_PACKAGE, ("not installed",))[0]
    if have.split("-")[0] != want:
        raise BakeError(f"{CLOUDWATCH_AGENT_PACKAGE} is '{have}', need {want}: the bake must install the pinned agent")
    return want


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def _lustre(kernel: str | None, pkgs: dict[str, tuple[str, bool]]) -> dict:
    if os.environ.get("GPU_CLUSTER_FSX", "lustre") == "bind":
        return {"skipped": "GPU_CLUSTER_FSX=bind: /fsx is a bind mount, not Lustre (docs/node-contract.md)"}
    if kernel is None:
        raise BakeError(f"{LANE_KERNEL_NOTE}: cannot check that a Lustre client module exists for it")
    path, vermagic = lustre_module(kernel)
    utils = pkgs.get("lustre-client-utils", ("",))[0]
    if not utils:
        raise BakeError("lustre-client-utils is not installed: mount.lustre is missing, /fsx would not mount")
    return {"kernel": kernel, "module": path, "vermagic": vermagic, "utils": utils}


def _must_hold(pkgs: dict[str, tuple[str, bool]], kernel: str | None) -> list[str]:
    names = [p for p in pkgs if any(fnmatch.fnmatchcase(p, pat) for pat in MUST_HOLD)]
    if kernel:
        names += [p for p in (f"linux-image-{kernel}", f"linux-modules-{kernel}") if p in pkgs]
    loose = sorted(p for p in names if not pkgs[p][1])
    if loose:
        raise BakeError(f"not held after step 20: {' '.join(loose)} (apt-mark hold): an upgrade could change them")
    return sorted(names)


def _dropins() -> dict[str, str]:
    out = {}
    for key, template in (
        ("NEEDRESTART_DROPIN", "needrestart.conf"),
        ("UNATTENDED_UPGRADES_DROPIN", "unattended-upgrades.conf"),
    ):
        path = _env(key)
        want = _read(os.path.join(_env("NODE_TEMPLATES"), template))
        got = _read(root_path(path))
        if not got or got != want:
            raise BakeError(f"{path} is {'missing' if not got else 'not the shipped ' + template}: step 20 installs it")
        out[path] = sha256_bytes(got.encode())
    blacklist = _run(["apt-config", "dump", "Unattended-Upgrade::Package-Blacklist"])
    for entry in ('"slurm"', '"munge$"', '"linux-"', '"lustre-"'):
        if entry not in blacklist:
            raise BakeError(f"apt-config does not show {entry} in Unattended-Upgrade::Package-Blacklist")
    return out


def _downloads() -> dict[str, str]:
    recorded = {}
    for line in _read(root_path(os.environ.get("DOWNLOAD_RECORD", ""))).splitlines():
        w = line.split()
        if len(w) == 2:
            recorded[w[1]] = w[0]
    out = {}
    for file, want in download_pins(os.environ.get("DOWNLOAD_SHA256", "")).items():
        got = recorded.get(file) if want == RECORD else want
        if got is None:
            raise BakeError(f"{file} is pinned `record` but the bake recorded no digest for it in $DOWNLOAD_RECORD")
        out[file] = got
    return out


def _os_name() -> str:
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)', _read(root_path("/etc/os-release")), re.M)
    return m.group(1) if m else "unknown"


def build_manifest(now: float | None = None) -> dict:
    """Check what step 20 installed and describe it (BakeError at the first problem)."""
    pkgs = installed()
    kernel = image_kernel()
    versions = _check_packages(pkgs)
    lustre = _lustre(kernel, pkgs)
    held = _must_hold(pkgs, kernel)
    extra = ("enroot", "enroot+caps", "lustre-client-utils", CLOUDWATCH_AGENT_PACKAGE)
    listed = sorted({*held, *(p for p in pkgs if p in extra)})
    versions.update(kernel=kernel or "none", lustre=lustre.get("utils", "none"))
    return {
        "format": FORMAT,
        "baked": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "os": _os_name(),
        "kernel": kernel,
        "lustre": lustre,
        "pins": pins_from_env(),
        "versions": versions,
        "packages": {p: pkgs[p][0] for p in listed},
        "held": held,
        "downloads": _downloads(),
        "dropins": _dropins(),
    }


def manifest_bytes(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


def write_manifest(manifest: dict) -> str:
    data = manifest_bytes(manifest)
    digest = sha256_bytes(data)
    path = root_path(manifest_path())
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for name, content in ((path, data), (path + ".sha256", f"{digest}  manifest.json\n".encode())):
        with open(name + ".tmp", "wb") as f:
            f.write(content)
        os.replace(name + ".tmp", name)
    return digest


def read_manifest(root: str | None = None) -> tuple[dict, str]:
    """The manifest and its sha256, after checking it against manifest.json.sha256
    (`root`: an image root read from outside, as the lanes do)."""
    name = manifest_path()
    path = root_path(name, root)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise BakeError(f"cannot read {name}: {err.strerror}") from None
    digest = sha256_bytes(data)
    want = _read(path + ".sha256").split()[:1]
    if want != [digest]:
        raise BakeError(f"{name} has sha256 {digest}, {name}.sha256 says {want[0] if want else 'nothing'}")
    try:
        manifest = json.loads(data)
    except ValueError as err:
        raise BakeError(f"{name} is not JSON: {err}") from None
    if manifest.get("format") != FORMAT:
        raise BakeError(f"{name} is format {manifest.get('format')}, this node reads format {FORMAT}")
    return manifest, digest


# --- verify: a node booting from a baked image -------------------------------------------


def verify() -> tuple[dict, str, list[str]]:
    """(manifest, sha256, notes), or BakeError: the first thing that differs."""
    manifest, digest = read_manifest()
    problems = pin_problems(manifest, pins_from_env())
    if problems:
        raise BakeError(
            f"this image was baked for other pins ({'; '.join(problems)}): bake a new image "
            "(python3 -m ops bake) and pin it, or pin the image baked for these pins"
        )
    pkgs = installed()
    for name, version in sorted(manifest["packages"].items()):
        have = pkgs.get(name)
        if have is None or have[0] != version:
            raise BakeError(f"{name} is {have[0] if have else 'not installed'}, the image was baked with {version}")
        if name in manifest["held"] and not have[1]:
            raise BakeError(f"{name} is no longer held (apt-mark hold), as the image was baked")
    enroot = _run(["enroot", "version"]).strip()
    if enroot != manifest["versions"]["enroot"]:
        raise BakeError(f"enroot version is '{enroot}', the image was baked with {manifest['versions']['enroot']}")
    for path, want in manifest["dropins"].items():
        if sha256_bytes(_read(root_path(path)).encode()) != want:
            raise BakeError(f"{path} differs from the baked image's")
    return manifest, digest, _verify_kernel(manifest)


def _verify_kernel(manifest: dict) -> list[str]:
    lustre = manifest["lustre"]
    if "skipped" in lustre:
        return [f"Lustre client: {lustre['skipped']}"]
    running = _run(["uname", "-r"]).strip()
    if running != manifest["kernel"]:
        raise BakeError(
            f"running kernel {running}, the image was baked for {manifest['kernel']} (its Lustre module): "
            "a kernel changed after the bake; boot the baked kernel or bake a new image"
        )
    lustre_module(running)
    return []


# --- the command line --------------------------------------------------------------------


def clean() -> None:
    """The bake's run of the entry point is not a node: no status, no logs, no identity."""
    import shutil

    for key, default in (
        ("GPU_CLUSTER_STATE", "/var/lib/gpu-cluster"),
        ("GPU_CLUSTER_LOG_DIR", "/var/log/gpu-cluster"),
    ):
        shutil.rmtree(root_path(os.environ.get(key) or default), ignore_errors=True)


def result_line() -> str:
    manifest, digest = read_manifest()
    return f"{RESULT_MARK} " + json.dumps({"manifest_sha256": digest, "manifest": manifest}, sort_keys=True)


def parse_result(text: str) -> tuple[dict, str] | str | None:
    """From a build instance's console: (manifest, sha256) of a finished bake, the
    failure's reason (str), or None when neither line is there (yet). The digest is
    recomputed from the manifest: a garbled console line is refused, not trusted."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith(FAILED_MARK):
            return line[len(FAILED_MARK) :].strip() or "the bake failed (no reason printed)"
        if line.startswith(RESULT_MARK + " "):
            try:
                doc = json.loads(line[len(RESULT_MARK) + 1 :])
                manifest, digest = doc["manifest"], doc["manifest_sha256"]
            except (ValueError, KeyError, TypeError) as err:
                raise BakeError(f"the bake's result line is not readable ({err}): {line[:80]}...") from None
            if sha256_bytes(manifest_bytes(manifest)) != digest:
                raise BakeError(f"the bake's result line says sha256 {digest}, its manifest has another")
            return manifest, digest
    return None


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else ""
    try:
        if cmd == "kernel" and len(argv) == 2:
            print(image_kernel() or "")
        elif cmd == "lustre-module" and len(argv) == 3:
            print(lustre_module(argv[2])[0])
        elif cmd == "record" and len(argv) == 2:
            digest = write_manifest(build_manifest())
            print(f"image manifest {manifest_path()} sha256 {digest}")
        elif cmd == "verify" and len(argv) == 2:
            manifest, digest, notes = verify()
            print(f"NODE_IMAGE_MANIFEST={digest}")
            print(f"NODE_KERNEL={manifest['kernel'] or 'none'}")
            for n in notes:
                print(f"# {n}")
        elif cmd == "clean" and len(argv) == 2:
            clean()
        elif cmd == "result" and len(argv) == 2:
            print(result_line())
        else:
            print(__doc__.split("\n\n")[1], file=sys.stderr)
            return 2
    except BakeError as err:
        print(f"gpu-cluster-bake {cmd}: {err}", file=sys.stderr)
        return 1
    return 0


# --- the manifest as AMI tags (ops bake, ops preflight, ops status, the lanes) -------------


def image_tags(manifest: dict, digest: str) -> dict[str, str]:
    """The tags a baked AMI carries: the key versions, the manifest's sha256, each
    download's digest. At most 50 tags of 256 characters per AMI [AWS-TAGS]."""
    tags = {f"{TAG_PREFIX}Manifest": digest, f"{TAG_PREFIX}Baked": manifest["baked"]}
    for name in TAGGED_VERSIONS:
        tags[f"{TAG_PREFIX}{name.capitalize()}"] = str(manifest["versions"][name])
    for file, digest_ in sorted(manifest["downloads"].items()):
        tags[f"{DOWNLOAD_TAG_PREFIX}{file}"] = digest_
    for key, value in tags.items():
        if len(key) > MAX_KEY or len(value) > MAX_VALUE:
            raise BakeError(f"image tag {key}={value[:40]}...: longer than AWS's {MAX_KEY}/{MAX_VALUE} characters")
    return tags


def recorded_from_tags(tags: dict[str, str]) -> dict | None:
    """The manifest fields `pin_problems` reads, from an AMI's tags; None when the image
    carries no manifest tag (not baked by gpu-cluster)."""
    if f"{TAG_PREFIX}Manifest" not in tags:
        return None
    versions = {n: tags.get(f"{TAG_PREFIX}{n.capitalize()}") for n in TAGGED_VERSIONS}
    downloads = {k[len(DOWNLOAD_TAG_PREFIX) :]: v for k, v in tags.items() if k.startswith(DOWNLOAD_TAG_PREFIX)}
    return {"manifest_sha256": tags[f"{TAG_PREFIX}Manifest"], "versions": versions, "downloads": downloads}


if __name__ == "__main__":
    sys.exit(main(sys.argv))
