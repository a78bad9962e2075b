#!/usr/bin/python3
"""gpu-cluster-health: Slurm's HealthCheckProgram on every node (docs/health.md).

    gpu-cluster-health              run the checks, drain or resume this node, write the record
    gpu-cluster-health --no-slurm   run the checks and print the record; change nothing in Slurm
    gpu-cluster-health --clear-xid  forget the XID faults kept from earlier runs (after a repair)

slurmd runs it as root every HealthCheckInterval seconds and kills it after 60 s
[SLURM-HEALTH], so only cheap checks run here, each tool call bounded (TOOL_TIMEOUT),
the whole run a few seconds: GPU count and PCIe link against the catalog, new XID events,
ECC and row remaps, EFA devices and ports, /fsx mounted and writable, node-local NVMe,
munge, slurmd, clock sync, and `dcgmi diag -r 1` where dcgmi is installed [DCGM-DIAG].
A check whose tool is missing is skipped with the reason, as the first-boot gate does.

A failure drains the node with `gpu-cluster health: <check evidence>`; a run where every
check passes resumes the node only when the drain reason is this program's own (never a
drain set by an operator, the gate, block-end or `ops replace`). Each run writes
HEALTH_RECORDS/<node>.json on /fsx (the `ops status` health column).

Settings: $GPU_CLUSTER_ETC/cluster.env, then overrides.env (HEALTH_* keys,
userdata/render.py health_env). Stdlib only: the nodes run it with the system Python.
"""

import argparse
import json
import os
import re
import shlex
import socket
import struct
import subprocess
import sys
import threading
import time

# The exit-code table of every gpu-cluster CLI: a copy of clitools/exits.py (this program
# runs on the nodes as a single file); tests/repo/test_exit_codes.py keeps it equal.
# slurmd logs a non-zero exit ("health_check failed: rc:1 ...") and acts on nothing else.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
REASON_PREFIX = "gpu-cluster health:"
TOOL_TIMEOUT = 15  # seconds per tool call; dcgmi gets DCGM_TIMEOUT
DCGM_TIMEOUT = 40  # level 1 takes seconds; the whole run must stay under Slurm's 60 s
FSX_TIMEOUT = 10  # a hung Lustre write is a failure, not a hung health program
# Every tool call ends by this many seconds after the start, and checks not begun by then
# are skipped: the record must be written before Slurm's kill at 60 s.
RUN_BUDGET = 45
_deadline = [time.monotonic() + RUN_BUDGET]
# slurmd runs the program with a near-empty environment: without PATH, find the tools here.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# XID classes [NV-XID]: what NVIDIA's catalog gives as the recovery. `replace`: the
# hardware is at fault (reset first per NVIDIA, replace when it persists; on a rented
# instance a replacement is the reset that sticks); `reset`: a GPU reset or reboot
# clears it; `application`: the job's own fault, recorded, the node stays in service.
XID_CLASSES = {
    "replace": {
        48: "double-bit ECC error",
        64: "row remapping failure",
        74: "NVLink error",
        79: "GPU has fallen off the bus",
        92: "high single-bit ECC error rate",
    },
    "reset": {
        61: "internal micro-controller breakpoint",
        62: "internal micro-controller halt",
        63: "row remapping pending",
        94: "contained ECC error",
        95: "uncontained ECC error",
        119: "GSP RPC timeout",
        120: "GSP error",
        140: "unrecovered ECC error",
    },
    "application": {
        13: "graphics engine exception",
        31: "GPU memory page fault",
        43: "GPU stopped processing",
        45: "preemptive cleanup",
        68: "video decoder exception",
        69: "graphics engine class error",
    },
}
XID_LINE = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[^)]+)\): (?P<xid>\d+)")
DMESG_TIME = re.compile(r"^\[\s*(?P<t>\d+\.\d+)\]")


def xid_class(xid):
    """(class, description) of an XID; unknown ones are `unclassified` (recorded only)."""
    for cls, table in XID_CLASSES.items():
        if xid in table:
            return cls, table[xid]
    return "unclassified", "not in the catalog this program knows"


# --- settings and tools -----------------------------------------------------------------


def read_env(etc):
    """cluster.env then overrides.env: shell `KEY=value` lines (shlex-quoted by the renderer)."""
    env = {}
    for name in ("cluster.env", "overrides.env"):
        try:
            with open(os.path.join(etc, name)) as f:
                text = f.read()
        except OSError:
            continue
        for line in text.splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and re.match(r"^[A-Z_][A-Z0-9_]*$", key):
                parts = shlex.split(value, comments=True)
                env[key] = parts[0] if parts else ""
    return env


def run(argv, timeout=TOOL_TIMEOUT, stdin=None):
    """(returncode, stdout, stderr); returncode None when the tool is missing, -1 on timeout."""
    env = {**os.environ, "PATH": os.environ.get("PATH") or SYSTEM_PATH}
    timeout = max(1, min(timeout, _deadline[0] - time.monotonic()))
    try:
        r = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        return None, "", f"{argv[0]} not installed"
    except subprocess.TimeoutExpired:
        return -1, "", f"{argv[0]} did not finish in {timeout} s"
    return r.returncode, r.stdout, r.stderr


def result(check, status, detail, action=None):
    out = {"check": check, "status": status, "detail": detail}
    if action:
        out["action"] = action
    return out


def _int(env, key, default=0):
    try:
        return int(env.get(key, default) or default)
    except ValueError:
        return default


# --- GPU checks ---------------------------------------------------------------------------


def check_gpu_count(env):
    want = _int(env, "HEALTH_GPUS")
    if want == 0:
        return result("gpu-count", "skip", "no GPUs expected on this instance type")
    rc, out, err = run(["nvidia-smi", "-L"])
    if rc is None:
        return result("gpu-count", "skip", err)
    have = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    if rc != 0 or have != want:
        why = f"; nvidia-smi exit {rc}: {err.strip()[:80]}" if rc else ""
        return result("gpu-count", "fail", f"gpu count {have} of {want} (nvidia-smi -L){why}", "replace")
    return result("gpu-count", "ok", f"{have} GPUs")


def check_pcie(env):
    gen, width = _int(env, "HEALTH_PCIE_GEN"), _int(env, "HEALTH_PCIE_WIDTH")
    if not _int(env, "HEALTH_GPUS") or not (gen or width):
        return result("pcie", "skip", "no PCIe link expected in the catalog")
    # gen.max, not gen.current: the current generation drops while a GPU idles [NV-SMI].
    query = "--query-gpu=pci.bus_id,pcie.link.gen.max,pcie.link.width.current"
    rc, out, err = run(["nvidia-smi", query, "--format=csv,noheader,nounits"])
    if rc is None:
        return result("pcie", "skip", err)
    if rc != 0:
        return result("pcie", "skip", f"nvidia-smi {query} exit {rc}: {err.strip()[:80]}")
    bad, seen = [], 0
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3 or not all(f.isdigit() for f in fields[1:]):
            continue  # [N/A] on a GPU that does not report it
        seen += 1
        bus, g, w = fields[0], int(fields[1]), int(fields[2])
        if (gen and g < gen) or (width and w < width):
            bad.append(f"{bus} gen{g} x{w}")
    if not seen:
        return result("pcie", "skip", "nvidia-smi reports no PCIe link figures")
    if bad:
        detail = f"pcie link below gen{gen} x{width}: {', '.join(bad[:3])} (nvidia-smi pcie.link)"
        return result("pcie", "fail", detail, "replace")
    return result("pcie", "ok", f"every link gen{gen} x{width} or better")


def _smi_q_values(text):
    """`nvidia-smi -q` -> [(gpu bus id, "Section/Sub/Key", value)] from its indentation."""
    out, stack, gpu = [], [], ""
    for line in text.splitlines():
        if line.startswith("GPU "):
            gpu, stack = line[4:].strip(), []
            continue
        if not line.strip() or not gpu:
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, sep, value = line.strip().partition(":")
        if not sep:
            stack.append((indent, key.strip()))
            continue
        out.append((gpu, "/".join([s for _, s in stack] + [key.strip()]), value.strip()))
    return out


def _ecc_problem(path, value):
    """(action, what) when one `nvidia-smi -q` value means trouble, else None."""
    if path.endswith("Remapping Failure Occurred") and value.lower() == "yes":
        return "replace", "row remapping failure"
    if path.startswith("Remapped Rows") and path.endswith("Pending") and value.lower() == "yes":
        return "reset", "row remap pending"
    volatile_uncorrectable = "Volatile" in path and ("Uncorrectable" in path or "Double Bit" in path)
    if volatile_uncorrectable and value.isdigit() and int(value) > 0:
        return "reset", f"{path.split('/')[-1].strip() or 'uncorrectable'} ECC {value}"
    return None


def check_ecc(env):
    if not _int(env, "HEALTH_GPUS"):
        return result("ecc", "skip", "no GPUs expected on this instance type")
    rc, out, err = run(["nvidia-smi", "-q", "-d", "ECC,ROW_REMAPPER"])
    if rc is None:
        return result("ecc", "skip", err)
    if rc != 0:
        return result("ecc", "skip", f"nvidia-smi -q exit {rc}: {err.strip()[:80]}")
    found = []
    for gpu, path, value in _smi_q_values(out):
        problem = _ecc_problem(path, value)
        if problem:
            found.append((problem[0], f"{gpu} {problem[1]}"))
    if found:
        action = "replace" if any(a == "replace" for a, _ in found) else "reset"
        what = ", ".join(w for _, w in found[:3])
        return result("ecc", "fail", f"{what} (nvidia-smi -q -d ECC,ROW_REMAPPER)", action)
    return result("ecc", "ok", "no uncorrectable ECC error, no pending or failed row remap")


# --- XID events -----------------------------------------------------------------------------


def _read_kernel(state):
    """New kernel-log lines since the last run (dmesg timestamps; a reboot starts over)."""
    rc, out, err = run(["dmesg"])
    if rc is None or rc != 0:
        return None, err.strip() or f"dmesg exit {rc}"
    last = float(state.get("kernel_time", -1.0))
    lines, newest = [], last
    for line in out.splitlines():
        m = DMESG_TIME.match(line)
        t = float(m.group("t")) if m else None
        if t is not None and t <= last:
            continue
        lines.append(line)
        newest = max(newest, t if t is not None else newest)
    state["kernel_time"] = newest
    return lines, "kernel log"


def _read_file(state, path):
    """New lines of a log file since the last run (offset; a truncated or new file starts over)."""
    try:
        st = os.stat(path)
        offset = int(state.get("file_offset", 0))
        if state.get("file_inode") != st.st_ino or st.st_size < offset:
            offset = 0
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError as e:
        return None, f"{path}: {e.strerror}"
    state.update(file_inode=st.st_ino, file_offset=offset + len(data))
    return data.decode("utf-8", "replace").splitlines(), path


def new_xids(env, state):
    """([{xid, pci, class, what}], source label) of the XID lines new since the last run."""
    source = env.get("HEALTH_XID_SOURCE", "kernel") or "kernel"
    if state.get("xid_source") != source:
        state.pop("kernel_time", None)
        state.pop("file_offset", None)
        state["xid_source"] = source
    lines, label = _read_kernel(state) if source == "kernel" else _read_file(state, source)
    if lines is None:
        return None, label
    events = []
    for line in lines:
        m = XID_LINE.search(line)
        if m:
            xid = int(m.group("xid"))
            cls, what = xid_class(xid)
            events.append({"xid": xid, "pci": m.group("pci"), "class": cls, "what": what})
    return events, label


def check_xid(env, state):
    """Hardware and reset XIDs stay failed: `reset` ones until the next boot (a reboot resets
    the GPUs), `replace` ones until `--clear-xid` or a new instance (a new state file)."""
    events, label = new_xids(env, state)
    if events is None:
        return result("xid", "skip", f"cannot read the XID source: {label}")
    kept = state.setdefault("xid_faults", [])
    for e in events:
        if e["class"] in ("replace", "reset") and not any(k["xid"] == e["xid"] and k["pci"] == e["pci"] for k in kept):
            kept.append({**e, "source": label})
    others = sorted({e["xid"] for e in events if e["class"] not in ("replace", "reset")})
    note = f"; application/unclassified XIDs {', '.join(map(str, others))}" if others else ""
    if kept:
        first = kept[0]
        action = "replace" if any(k["class"] == "replace" for k in kept) else "reset"
        more = f" (+{len(kept) - 1} more)" if len(kept) > 1 else ""
        detail = f"xid {first['xid']} ({first['class']}: {first['what']}) on {first['pci']}{more} ({first['source']})"
        return result("xid", "fail", detail + note, action)
    return result("xid", "ok", f"no hardware XID ({label}){note}")


def check_dcgm(env):
    if not _int(env, "HEALTH_DCGM_LEVEL1", 1):
        return result("dcgm", "skip", "health.dcgm_level1 is false")
    rc, out, err = run(["dcgmi", "diag", "-r", "1"], timeout=DCGM_TIMEOUT)
    if rc is None:
        return result("dcgm", "skip", err)
    failed = [line.strip(" |") for line in out.splitlines() if re.search(r"\bFail", line)]
    if failed:
        return result(
            "dcgm", "fail", f"dcgmi diag -r 1: {' '.join(failed[0].replace('|', ' ').split())[:120]}", "replace"
        )
    if rc != 0:  # the host engine is down or busy: a tool problem, not a GPU verdict
        return result("dcgm", "skip", f"dcgmi diag -r 1 exit {rc}: {(err or out).strip()[-120:]}")
    return result("dcgm", "ok", "dcgmi diag -r 1 passed")


# --- node checks ------------------------------------------------------------------------------


def check_efa(env):
    want = _int(env, "HEALTH_EFA_COUNT")
    if want == 0:
        return result("efa", "skip", "no EFA devices expected")
    root = env.get("HEALTH_SYSFS_INFINIBAND", "/sys/class/infiniband")
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        devices = []
    down = []
    for dev in devices:
        ports = os.path.join(root, dev, "ports")
        for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else ["?"]:
            try:
                with open(os.path.join(ports, port, "state")) as f:
                    state = f.read().strip()
            except OSError:
                state = "unreadable"
            if not state.endswith("ACTIVE"):
                down.append(f"{dev}/{port} {state}")
    if len(devices) != want or down:
        detail = f"efa devices {len(devices)} of {want}"
        if down:
            detail += f", ports not ACTIVE: {', '.join(down[:3])}"
        return result("efa", "fail", f"{detail} ({root})", "replace")
    return result("efa", "ok", f"{want} EFA devices, every port ACTIVE")


def _unescape(field):
    """A mountinfo path field: space, tab, newline and backslash are octal escapes (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def is_mount(path, mountinfo="/proc/self/mountinfo"):
    """Whether `path` is a mount point, as mountpoint(1) decides: listed in
    /proc/self/mountinfo. os.path.ismount compares device numbers, so it misses a bind
    mount from the same file system (the local namespace lane's /fsx)."""
    target = os.path.realpath(path)
    try:
        with open(mountinfo) as f:
            if any(len(x) > 4 and _unescape(x[4]) == target for x in (line.split() for line in f)):
                return True
    except OSError:
        pass
    return os.path.ismount(path)


def bounded(fn, timeout):
    """fn() in a thread: (True, value) or (False, None) when it did not return in time
    (a hung file system must not hang the program past Slurm's kill)."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except OSError as e:
            box["value"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    return ("value" in box), box.get("value")


def _write_probe(path):
    with open(path, "w") as f:
        f.write("gpu-cluster health probe\n")
        f.flush()
        os.fsync(f.fileno())
    os.unlink(path)


def check_fsx(env, node):
    mount = env.get("FSX_MOUNTPOINT", "/fsx")
    if not is_mount(mount):
        return result("fsx", "fail", f"{mount} not mounted (/proc/mounts)", "reset")
    records = env.get("HEALTH_RECORDS") or os.path.join(env.get("FSX_ROOT", mount), "health")
    probe = os.path.join(records, f".probe-{node}")
    done, value = bounded(lambda: (os.makedirs(records, exist_ok=True), _write_probe(probe)), FSX_TIMEOUT)
    if not done:
        return result("fsx", "fail", f"{mount} write did not finish in {FSX_TIMEOUT} s ({probe})", "reset")
    if isinstance(value, OSError):
        return result("fsx", "fail", f"{mount} not writable: {value.strerror} ({probe})", "reset")
    return result("fsx", "ok", f"{mount} mounted and writable")


def check_nvme(env):
    mount = env.get("HEALTH_NVME_MOUNT", "")
    if not mount:
        return result("nvme", "skip", "no node-local NVMe on this instance type")
    if not is_mount(mount):
        return result("nvme", "fail", f"{mount} not mounted (/proc/mounts)", "reset")
    st = os.statvfs(mount)
    free = 100.0 * st.f_bavail / st.f_blocks if st.f_blocks else 0.0
    floor = _int(env, "HEALTH_NVME_MIN_FREE_PERCENT", 5)
    if free < floor:
        return result("nvme", "fail", f"{mount} {free:.1f}% free, below {floor}% (statvfs)", "isolate")
    return result("nvme", "ok", f"{mount} {free:.0f}% free")


def check_munge(env):
    sock = env.get("HEALTH_MUNGE_SOCKET", "")
    opt = [f"--socket={sock}"] if sock else []
    rc, cred, err = run(["munge", *opt, "-n"])
    if rc is None:
        return result("munge", "skip", err)
    if rc == 0:
        rc, _, err = run(["unmunge", *opt], stdin=cred)
        if rc is None:
            return result("munge", "skip", err)
    if rc != 0:
        return result(
            "munge", "fail", f"munge credential round trip failed: {err.strip()[:100]} (munge -n | unmunge)", "reset"
        )
    return result("munge", "ok", "munge -n | unmunge")


def check_slurmd(env):
    pidfile = env.get("HEALTH_SLURMD_PIDFILE", "/run/slurmd.pid")
    try:
        with open(pidfile) as f:
            pid = int(f.read().split()[0])
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
    except (OSError, ValueError, IndexError):
        return result("slurmd", "fail", f"slurmd not running (no live pid in {pidfile})", "reset")
    if comm != "slurmd":
        return result("slurmd", "fail", f"pid {pid} from {pidfile} is {comm}, not slurmd", "reset")
    return result("slurmd", "ok", f"slurmd pid {pid}")


def _chrony(max_ms):
    rc, out, err = run(["chronyc", "-n", "tracking"])
    if rc is None or rc != 0:
        return None
    fields = dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in out.splitlines()))
    leap = fields.get("Leap status", "")
    if leap != "Normal":
        return result(
            "clock", "fail", f"clock not synchronised: leap status {leap or 'missing'} (chronyc tracking)", "reset"
        )
    m = re.match(r"([\d.]+) seconds (fast|slow)", fields.get("System time", ""))
    offset_ms = float(m.group(1)) * 1000 if m else 0.0
    if offset_ms > max_ms:
        return result(
            "clock",
            "fail",
            f"clock {offset_ms:.0f} ms {m.group(2)} of NTP, over {max_ms} ms (chronyc tracking)",
            "reset",
        )
    return result("clock", "ok", f"synchronised, {offset_ms:.1f} ms off (chronyc)")


NTP_EPOCH = 2208988800  # seconds from 1900-01-01 (NTP's era 0) to 1970-01-01
SNTP_TIMEOUT = 2.0


def _ntp_time(data, at):
    secs, frac = struct.unpack("!II", data[at : at + 8])
    return secs - NTP_EPOCH + frac / 2**32


def sntp_offset(host, port=123, timeout=SNTP_TIMEOUT):
    """(offset seconds of the reference minus this clock, round trip, stratum, leap) from one
    SNTP exchange [SNTP]; raises OSError when the reference does not answer."""
    packet = bytearray(48)
    packet[0] = (0 << 6) | (4 << 3) | 3  # no leap warning, version 4, client
    t1 = time.time()
    secs = int(t1) + NTP_EPOCH
    packet[40:48] = struct.pack("!II", secs, int((t1 % 1) * 2**32))
    addr = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_DGRAM)[0][4]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(bytes(packet), addr)
        data, _ = sock.recvfrom(512)
    t4 = time.time()
    if len(data) < 48 or data[0] & 7 != 4:
        raise OSError(f"not an NTP server answer from {host}:{port}")
    t2, t3 = _ntp_time(data, 32), _ntp_time(data, 40)
    return ((t2 - t1) + (t3 - t4)) / 2, (t4 - t1) - (t3 - t2), data[1], data[0] >> 6


def _reference(ref, max_ms):
    """The clock against a configured NTP reference (health.clock_reference), host[:port]."""
    host, _, port = ref.partition(":")
    try:
        offset, _, stratum, leap = sntp_offset(host, int(port or 123))
    except (OSError, ValueError) as e:
        return result("clock", "fail", f"clock reference {ref} did not answer: {e} (SNTP)", "reset")
    if leap == 3 or stratum == 0:
        return result(
            "clock", "fail", f"clock reference {ref} is not synchronised (leap {leap}, stratum {stratum})", "reset"
        )
    ms = abs(offset) * 1000
    side = "slow" if offset > 0 else "fast"
    if ms > max_ms:
        return result("clock", "fail", f"clock {ms:.0f} ms {side} of {ref}, over {max_ms} ms (SNTP)", "reset")
    return result("clock", "ok", f"{ms:.1f} ms {side} of {ref} (SNTP, stratum {stratum})")


def check_clock(env):
    """Against HEALTH_CLOCK_REFERENCE (SNTP) when set; else chronyc tracking [CHRONYC] where
    chrony runs, else timedatectl's NTPSynchronized."""
    ref = env.get("HEALTH_CLOCK_REFERENCE", "")
    if ref:
        return _reference(ref, _int(env, "HEALTH_CLOCK_MAX_OFFSET_MS", 100))
    found = _chrony(_int(env, "HEALTH_CLOCK_MAX_OFFSET_MS", 100))
    if found:
        return found
    rc, out, err = run(["timedatectl", "show", "-p", "NTPSynchronized", "--value"])
    if rc is None:
        return result("clock", "skip", "neither chronyc nor timedatectl answers")
    if rc != 0:
        return result("clock", "skip", f"timedatectl exit {rc}: {err.strip()[:80]}")
    if out.strip() != "yes":
        return result("clock", "fail", f"clock not synchronised: NTPSynchronized={out.strip()} (timedatectl)", "reset")
    return result("clock", "ok", "synchronised (timedatectl)")


# --- state, Slurm, record -------------------------------------------------------------------


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def load_state(path):
    """The previous run's state; a reboot forgets `reset` XIDs and the kernel-log position."""
    try:
        with open(path) as f:
            state = json.load(f)
    except (OSError, ValueError):
        state = {}
    if state.get("boot_id") != boot_id():
        state.pop("kernel_time", None)
        state["xid_faults"] = [k for k in state.get("xid_faults", []) if k.get("class") == "replace"]
    state["boot_id"] = boot_id()
    return state


def write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def run_checks(env, state, node):
    checks = [
        ("gpu-count", lambda: check_gpu_count(env)),
        ("pcie", lambda: check_pcie(env)),
        ("xid", lambda: check_xid(env, state)),
        ("ecc", lambda: check_ecc(env)),
        ("efa", lambda: check_efa(env)),
        ("fsx", lambda: check_fsx(env, node)),
        ("nvme", lambda: check_nvme(env)),
        ("munge", lambda: check_munge(env)),
        ("slurmd", lambda: check_slurmd(env)),
        ("clock", lambda: check_clock(env)),
        ("dcgm", lambda: check_dcgm(env)),
    ]
    out = []
    for name, check in checks:
        if time.monotonic() >= _deadline[0]:
            out.append(result(name, "skip", f"the run's {RUN_BUDGET} s budget is spent (tools were slow)"))
        else:
            out.append(check())
    return out


def drain_reason(failures):
    first = failures[0]["detail"]
    more = f" (+{len(failures) - 1} more: {', '.join(f['check'] for f in failures[1:])})" if failures[1:] else ""
    # Slurm keeps the reason as given; quotes would end the scontrol argument early.
    return f"{REASON_PREFIX} {first}{more}".replace('"', "'")


def slurm_node(node):
    """(state, reason) from sinfo; (None, err) when Slurm cannot be asked."""
    rc, out, err = run(["sinfo", "-h", "-N", "-n", node, "-o", "%T|%E"])
    if rc is None or rc != 0 or "|" not in out:
        return None, (err or out).strip() or f"sinfo exit {rc}"
    state, _, reason = out.splitlines()[0].partition("|")
    return state.strip(), "" if reason.strip() == "none" else reason.strip()


def boot_state(env):
    """The boot's own state (`ok`, `running`, `retrying`, `failed`) from its local status file."""
    try:
        with open(env.get("HEALTH_BOOT_STATUS", "/var/lib/gpu-cluster/status")) as f:
            status = json.load(f)
        return str(status.get("state", "unknown")), str(status.get("step", ""))
    except (OSError, ValueError, AttributeError):
        return "not started", ""


def act(node, failures, env=None):
    """Drain on failure, resume our own drain when healthy; never touch another's drain.

    Nothing is changed while the boot runs: slurmd starts (and runs this program) at step
    50, before NVMe and the later steps are ready; a failed boot drains with its own reason."""
    boot, step = boot_state(env or {})
    if boot != "ok":
        return {"action": "none", "why": f"boot {boot}" + (f" at {step}" if step else "") + ": Slurm left as is"}
    state, reason = slurm_node(node)
    if state is None:
        return {"action": "none", "why": f"slurm unavailable: {reason}"}
    ours = reason.startswith(REASON_PREFIX)
    drained = "drain" in state or state.startswith("down")
    if failures:
        want = drain_reason(failures)
        if drained and reason and not ours:
            return {"action": "none", "why": f"already {state} by someone else: {reason}"}
        if ours and reason == want and drained:
            return {"action": "none", "why": "already drained for this reason"}
        rc, _, err = run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={want}"])
        return {"action": "drain", "reason": want, "ok": rc == 0, **({"error": err.strip()} if rc else {})}
    if drained and ours:
        rc, _, err = run(["scontrol", "update", f"nodename={node}", "state=resume"])
        return {"action": "resume", "previous_reason": reason, "ok": rc == 0, **({"error": err.strip()} if rc else {})}
    return {"action": "none", "why": f"healthy, {state}" + (f" ({reason})" if reason else "")}


def write_record(env, node, record):
    """HEALTH_RECORDS/<node>.json, only onto a mounted /fsx: written to the bare mount
    point it would land on the root volume and hide under the next mount."""
    mount = env.get("FSX_MOUNTPOINT", "/fsx")
    records = env.get("HEALTH_RECORDS") or os.path.join(env.get("FSX_ROOT", mount), "health")
    under_mount = os.path.abspath(records).startswith(os.path.abspath(mount).rstrip("/") + "/")
    if under_mount and not is_mount(mount):
        print(f"gpu-cluster-health: {mount} is not mounted; record not written", file=sys.stderr)
        return
    done, value = bounded(lambda: write_json(os.path.join(records, f"{node}.json"), record), FSX_TIMEOUT)
    if not done or isinstance(value, OSError):
        print(f"gpu-cluster-health: cannot write the record under {records}", file=sys.stderr)


def node_name():
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def _version():
    """The payload's version (lib/version beside bin/), else "unknown"."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "lib", "version")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(200).strip() or "unknown"
    except OSError:
        return "unknown"


def main(argv=None):
    """Exit 0 healthy, 1 a check failed (the node is drained unless --no-slurm)."""
    p = argparse.ArgumentParser(
        prog="gpu-cluster-health",
        description="gpu-cluster node health checks (Slurm's HealthCheckProgram)",
        epilog="example:\n  gpu-cluster-health --no-slurm",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"gpu-cluster-health (gpu-cluster) {_version()}")
    p.add_argument("--no-slurm", action="store_true", help="report only: do not drain or resume")
    p.add_argument("--clear-xid", action="store_true", help="forget the XID faults kept from earlier runs")
    args = p.parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug: one line for slurmd's log, never a traceback there
        print(
            f"gpu-cluster-health: internal error: {type(e).__name__}: {' '.join(str(e).split())[:300]}", file=sys.stderr
        )
        return EXIT_INTERNAL


def _run(args):
    started = time.monotonic()
    _deadline[0] = started + RUN_BUDGET
    env = read_env(os.environ.get("GPU_CLUSTER_ETC", "/etc/gpu-cluster"))
    state_path = env.get("HEALTH_STATE", "/var/lib/gpu-cluster/health-state.json")
    state = load_state(state_path)
    if args.clear_xid:
        state["xid_faults"] = []
    node = node_name()
    checks = run_checks(env, state, node)
    failures = [c for c in checks if c["status"] == "fail"]
    record = {
        "node": node,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "state": "unhealthy" if failures else "healthy",
        "reason": drain_reason(failures) if failures else "",
        "checks": checks,
        "slurm": {"action": "none", "why": "--no-slurm"} if args.no_slurm else act(node, failures, env),
    }
    record["seconds"] = round(time.monotonic() - started, 3)
    write_json(state_path, state)
    write_record(env, node, record)
    print(json.dumps(record, indent=2, sort_keys=True))
    return EXIT_FAILED if failures else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
