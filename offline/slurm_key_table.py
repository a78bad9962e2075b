"""The table of config keys Slurm 23.11 accepts, extracted from its release source.

    python -m offline.slurm_key_table --tarball slurm-23.11.4.tar.gz [--out FILE | --check FILE]

The nodes run Ubuntu 24.04's Slurm 23.11; this machine has Debian's 22.05 and 24.11 only,
so what 23.11 accepts is read from its source [SLURM-SRC-2311] instead of from a daemon. The tarball is
read in place (no extraction), and only Slurm's own parser tables are used:
- the key tables (`s_p_options_t`) of slurm.conf (`src/common/read_config.c`), of its
  line keys (NodeName, PartitionName, ...: the table the line's handler creates), of
  cgroup.conf (`src/interfaces/cgroup.c`) and gres.conf (`src/interfaces/gres.c`), with each
  key's value type; keys whose handler is `_defunct_option` are marked defunct (23.11
  parses them and logs "defunct, please remove it");
- the words the value parsers compare against (booleans, SelectTypeParameters,
  HealthCheckNodeState, log levels, rlimit names), taken from the named C function's
  string comparisons;
- the plugin names (`plugin_type[]` of every plugin under src/plugins) for the keys that
  name a plugin, with the extra words their loaders accept (`none` where read_config.c
  tests for it, `autodetect` for CgroupPlugin, MpiDefault's none/openmpi/pmix).
The result is model/slurm_keys_23_11.json (model/slurm_keys.py loads it); a test
re-extracts it from the tarball when the tarball is present and compares.

Exit status: 0 written (or `--check`: equal); 1 `--check`: the file differs; 2 usage;
3 the tarball cannot be read or lacks a file this reads.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tarfile
from pathlib import Path

SLURM_VERSION = "23.11.4"
TABLE_PATH = Path(__file__).resolve().parents[1] / "model" / "slurm_keys_23_11.json"

READ_CONFIG = "src/common/read_config.c"
CGROUP = "src/interfaces/cgroup.c"
GRES = "src/interfaces/gres.c"
PARSE_VALUE = "src/common/parse_value.c"
PROTOCOL_DEFS = "src/common/slurm_protocol_defs.c"
RLIMITS = "src/common/slurm_rlimits_info.c"
MPI = "src/interfaces/mpi.c"
PMIX_MAKEFILE = "src/plugins/mpi/pmix/Makefile.am"
SOURCES = (READ_CONFIG, CGROUP, GRES, PARSE_VALUE, PROTOCOL_DEFS, RLIMITS, MPI, PMIX_MAKEFILE)

# Each file: the table its parser starts from, as (source, table name, or the function
# whose local table it is).
FILE_TABLES = {
    "slurm.conf": (READ_CONFIG, "slurm_conf_options"),
    "cgroup.conf": (CGROUP, "_read_slurm_cgroup_conf"),
    "gres.conf": (GRES, "gres_g_node_config_load"),
}
# Words a key's value may be, from the function that parses it: (source, function,
# whether the value is a comma-separated list).
VALUE_WORDS = {
    "slurm.conf": {
        "SelectTypeParameters": (READ_CONFIG, "_parse_select_type_param", True),
        "HealthCheckNodeState": (READ_CONFIG, "_health_node_state", True),
        "SlurmctldDebug": (PROTOCOL_DEFS, "log_string2num", False),
        "SlurmdDebug": (PROTOCOL_DEFS, "log_string2num", False),
        "SlurmctldSyslogDebug": (PROTOCOL_DEFS, "log_string2num", False),
        "SlurmdSyslogDebug": (PROTOCOL_DEFS, "log_string2num", False),
        "PropagateResourceLimits": (RLIMITS, "parse_rlimits", True),
        "PropagateResourceLimitsExcept": (RLIMITS, "parse_rlimits", True),
    },
}
# Keys whose value names plugins: (plugin type, comma-separated list?, written with the
# `type/` prefix?). The loader of each is the interface of that type.
PLUGIN_KEYS = {
    "slurm.conf": {
        "AccountingStorageType": ("accounting_storage", False, True),
        "AuthAltTypes": ("auth", True, True),
        "AuthType": ("auth", False, True),
        "CredType": ("cred", False, True),
        "JobAcctGatherType": ("jobacct_gather", False, True),
        "JobCompType": ("jobcomp", False, True),
        "JobContainerType": ("job_container", False, True),
        "MpiDefault": ("mpi", False, False),
        "PreemptType": ("preempt", False, True),
        "PriorityType": ("priority", False, True),
        "ProctrackType": ("proctrack", False, True),
        "SchedulerType": ("sched", False, True),
        "SelectType": ("select", False, True),
        "SwitchType": ("switch", False, True),
        "TaskPlugin": ("task", True, True),
        "TopologyPlugin": ("topology", False, True),
    },
    "cgroup.conf": {"CgroupPlugin": ("cgroup", False, True)},
}
_TABLE = re.compile(r"s_p_options_t\s+(\w+)\s*\[\s*\]\s*=\s*\{")
_ENTRY = re.compile(r"\{\s*\"(\w+)\"\s*,\s*S_P_(\w+)\s*(?:,\s*(\w+))?")
_LITERAL_CMP = re.compile(r"x?str(?:n)?(case)?cmp\s*\(\s*[^,]*?,\s*\"([^\"]+)\"")
_PLUGIN_TYPE = re.compile(r"plugin_type\s*\[\s*\]\s*=\s*\"(\w+)/(\w+)\"")


class ExtractError(RuntimeError):
    pass


def read_sources(tarball: Path) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The C sources this reads, and every plugin's `type/name`, from the release tarball."""
    texts: dict[str, str] = {}
    plugins: dict[str, set[str]] = {}
    with tarfile.open(tarball) as tar:
        for member in tar:
            if not member.isfile():
                continue
            rel = member.name.split("/", 1)[1] if "/" in member.name else member.name
            is_plugin = rel.startswith("src/plugins/") and rel.endswith(".c")
            if rel not in SOURCES and not is_plugin:
                continue
            f = tar.extractfile(member)
            text = f.read().decode("utf-8", "replace") if f else ""
            if rel in SOURCES:
                texts[rel] = text
            for kind, name in _PLUGIN_TYPE.findall(text) if is_plugin else ():
                plugins.setdefault(kind, set()).add(name)
    missing = [s for s in SOURCES if s not in texts]
    if missing:
        raise ExtractError(f"{tarball}: no {', '.join(missing)} (not a Slurm release source?)")
    return texts, {k: sorted(v) for k, v in sorted(plugins.items())}


def _braced(text: str, start: int) -> str:
    """The text from the `{` at `start` to its matching `}` (C comments and strings are
    rare enough in these tables and functions not to hold braces)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    raise ExtractError(f"unbalanced braces from offset {start}")


def function_body(text: str, name: str) -> str:
    """The body of the C function `name` as defined (not declared) in text."""
    m = re.search(rf"^(?:[A-Za-z][^\n;]*\b)?{re.escape(name)}\s*\([^;{{]*\)\s*\{{", text, re.M)
    if not m:
        raise ExtractError(f"function {name} not found")
    return _braced(text, m.end() - 1)


Rows = list[tuple[str, str, str | None]]  # (key, value type, handler) of a table


def tables(text: str) -> dict[str, Rows]:
    """Every `s_p_options_t NAME[] = {...}` table: (key, type, handler) rows."""
    out: dict[str, Rows] = {}
    for m in _TABLE.finditer(text):
        body = _braced(text, m.end() - 1)
        out[m.group(1)] = [(k, t.lower(), h) for k, t, h in _ENTRY.findall(body)]
    return out


def _table_of(text: str, where: str, all_tables: dict[str, Rows]) -> Rows:
    """A table by name, or the one a function creates its hash table from."""
    if where in all_tables:
        return all_tables[where]
    body = function_body(text, where)
    own = _TABLE.search(body)
    if own:
        return tables(body)[own.group(1)]
    created = re.search(r"s_p_hashtbl_create\s*\(\s*(\w+)\s*\)", body)
    if not created or created.group(1) not in all_tables:
        raise ExtractError(f"{where}: no s_p_options_t table found")
    return all_tables[created.group(1)]


def _keys(rows: Rows) -> dict[str, str]:
    return {k: ("defunct" if h == "_defunct_option" else t) for k, t, h in sorted(rows, key=lambda r: r[0].lower())}


def file_table(texts: dict[str, str], source: str, where: str) -> dict:
    """A file's keys, and for each line key (S_P_ARRAY) the keys of its own table."""
    text = texts[source]
    all_tables = tables(text)
    rows = _table_of(text, where, all_tables)
    lines = {k: _keys(_table_of(text, h, all_tables)) for k, t, h in rows if t == "array" and h}
    return {"keys": _keys(rows), "lines": dict(sorted(lines.items(), key=lambda kv: kv[0].lower()))}


def literals(body: str) -> list[str]:
    """The strings a function compares its input with, in order, once each."""
    return list(dict.fromkeys(word for _, word in _LITERAL_CMP.findall(body)))


def ignores_case(body: str) -> bool:
    """Whether every comparison in a function ignores case (xstrcasecmp, not xstrcmp)."""
    return all(case for case, _ in _LITERAL_CMP.findall(body))


def booleans(texts: dict[str, str]) -> dict[str, list[str]]:
    body = function_body(texts[PARSE_VALUE], "s_p_handle_boolean")
    true_part, _, false_part = body.partition("flag = true")
    return {"true": literals(true_part), "false": literals(false_part)}


def value_words(texts: dict[str, str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    rlimit_names = re.findall(r"\{\s*RLIMIT_\w+\s*,\s*\"(\w+)\"", texts[RLIMITS])
    for conf, keys in VALUE_WORDS.items():
        for key, (source, func, is_list) in keys.items():
            body = function_body(texts[source], func)
            words = literals(body) + (rlimit_names if source == RLIMITS else [])
            out.setdefault(conf, {})[key] = {
                "words": words,
                "list": is_list,
                "ignore_case": ignores_case(body),
                "numbers": func == "log_string2num",  # it takes a level number too
            }
    return out


def _none_words(text: str) -> dict[str, list[str]]:
    """slurm.conf keys whose plugin value may say `none`, as read_config.c tests the value:
    a substring test for "none" (`jobcomp/none` and `none` both pass) or one exact word."""
    fields = dict(re.findall(r"s_p_get_string\s*\(\s*&conf->(\w+)\s*,\s*\"(\w+)\"", text))
    out: dict[str, list[str]] = {}
    for how, field, word in re.findall(r"x?str(casestr|cmp)\s*\(\s*conf->(\w+)\s*,\s*\"(\w*/?none)\"\s*\)", text):
        if field in fields:
            out.setdefault(fields[field], []).append(word if how == "cmp" else "*none")
    return out


def plugin_values(texts: dict[str, str], plugins: dict[str, list[str]]) -> dict[str, dict]:
    none_words = _none_words(texts[READ_CONFIG])
    extras = {
        ("slurm.conf", "MpiDefault"): literals(function_body(texts[MPI], "_is_none_plugin"))
        + (["pmix"] if re.search(r"LN_S.*mpi_pmix\.so", texts[PMIX_MAKEFILE]) else []),
        ("cgroup.conf", "CgroupPlugin"): [
            w for w in literals(function_body(texts[CGROUP], "cgroup_g_init")) if "/" not in w
        ],
    }
    out: dict[str, dict] = {}
    for conf, keys in PLUGIN_KEYS.items():
        for key, (kind, is_list, prefixed) in keys.items():
            if kind not in plugins:
                raise ExtractError(f"{key}: no {kind}/* plugin in the source")
            names = [f"{kind}/{n}" if prefixed else n for n in plugins[kind]]
            nones = [w for x in none_words.get(key, []) for w in (["none", f"{kind}/none"] if x == "*none" else [x])]
            words = names + extras.get((conf, key), []) + (nones if conf == "slurm.conf" else [])
            # Plugin names are file names (type_name.so): compared exactly.
            out.setdefault(conf, {})[key] = {
                "plugin_type": kind,
                "list": is_list,
                "ignore_case": False,
                "numbers": False,
                "words": list(dict.fromkeys(words)),
            }
    return out


def extract(tarball: Path) -> dict:
    texts, plugins = read_sources(tarball)
    files = {conf: file_table(texts, *where) for conf, where in FILE_TABLES.items()}
    values = value_words(texts)
    for conf, keys in plugin_values(texts, plugins).items():
        values.setdefault(conf, {}).update(keys)
    return {
        "slurm": SLURM_VERSION,
        "source": {"tarball": tarball.name, "sha256": hashlib.sha256(tarball.read_bytes()).hexdigest()},
        "generated_by": "python -m offline.slurm_key_table",
        "case_insensitive": True,
        "boolean": booleans(texts),
        "files": files,
        "values": {conf: dict(sorted(v.items())) for conf, v in sorted(values.items())},
        "plugins": plugins,
    }


def render(table: dict) -> str:
    return json.dumps(table, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m offline.slurm_key_table", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tarball", type=Path, required=True, help=f"slurm-{SLURM_VERSION}.tar.gz")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--out", type=Path, help=f"write the table here (default {TABLE_PATH.name} in model/)")
    group.add_argument("--check", type=Path, help="compare with this table; exit 1 when it differs")
    args = ap.parse_args(argv)
    try:
        text = render(extract(args.tarball))
    except (OSError, tarfile.TarError, ExtractError) as err:
        print(f"slurm_key_table: {args.tarball}: {err}", file=sys.stderr)
        return 3
    if args.check:
        same = args.check.is_file() and args.check.read_text() == text
        print(f"slurm_key_table: {args.check} {'matches' if same else 'differs from'} {args.tarball.name}")
        return 0 if same else 1
    out = args.out or TABLE_PATH
    out.write_text(text)
    print(f"slurm_key_table: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
