"""offline/slurm_key_table.py: the 23.11 key table is what the release source says.

The re-extraction needs the Slurm 23.11.4 release tarball (vendored beside the clone, or
GPU_CLUSTER_VENDOR_DIR); without it those tests skip and say why. The parser tests use
small C snippets shaped like Slurm's own tables.
"""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from offline import slurm_key_table as skt
from tests.support.vendor import vendor_file

TARBALL, WHY = vendor_file(f"slurm-{skt.SLURM_VERSION}.tar.gz")
needs_tarball = pytest.mark.skipif(TARBALL is None, reason=WHY)


@pytest.fixture(scope="module")
def extracted() -> dict:
    assert TARBALL is not None
    return skt.extract(TARBALL)


@needs_tarball
def test_shipped_table_is_what_the_release_source_says(extracted):
    assert skt.render(extracted) == skt.TABLE_PATH.read_text(), (
        "model/slurm_keys_23_11.json differs from the source: python -m offline.slurm_key_table --tarball ..."
    )


@needs_tarball
def test_extraction_finds_the_tables_slurm_parses_with(extracted):
    files = extracted["files"]
    assert len(files["slurm.conf"]["keys"]) > 200
    assert files["slurm.conf"]["keys"]["DefCPUPerGPU"] == "uint64"
    assert files["slurm.conf"]["keys"]["SchedulerAuth"] == "defunct"
    assert set(files["slurm.conf"]["lines"]) == {"DownNodes", "FrontendName", "NodeName", "NodeSet", "PartitionName",
                                                 "SlurmctldHost"}  # fmt: skip
    assert files["slurm.conf"]["lines"]["NodeName"]["NodeAddr"] == "string"
    assert files["cgroup.conf"]["keys"]["CgroupAutomount"] == "defunct"
    assert files["cgroup.conf"]["keys"]["ConstrainCores"] == "boolean"
    assert set(files["gres.conf"]["lines"]) == {"Name", "NodeName"}
    assert extracted["values"]["cgroup.conf"]["CgroupPlugin"]["words"] == ["cgroup/v1", "cgroup/v2", "autodetect"]
    assert "mpi_pmix" not in json.dumps(extracted["plugins"]["mpi"])  # names, not file names
    assert extracted["boolean"] == {"true": ["yes", "up", "true", "1"], "false": ["no", "down", "false", "0"]}


@needs_tarball
def test_cli_check_says_whether_a_table_matches(tmp_path, capsys):
    assert skt.main(["--tarball", str(TARBALL), "--check", str(skt.TABLE_PATH)]) == 0
    stale = tmp_path / "stale.json"
    stale.write_text(skt.TABLE_PATH.read_text().replace('"TreeWidth": "uint16"', '"TreeWidth": "uint32"'))
    assert skt.main(["--tarball", str(TARBALL), "--check", str(stale)]) == 1
    assert "differs" in capsys.readouterr().out


def _tarball(tmp_path, files: dict[str, str]):
    path = tmp_path / "slurm-x.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"slurm-x/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_tarball_without_the_parser_sources_is_refused_with_exit_3(tmp_path, capsys):
    path = _tarball(tmp_path, {"README": "not slurm"})
    assert skt.main(["--tarball", str(path), "--out", str(tmp_path / "t.json")]) == 3
    assert "no src/common/read_config.c" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


def test_tables_read_keys_types_and_defunct_handlers():
    text = """
static s_p_options_t opts[] = {
	{"Alpha", S_P_STRING},
	{"beta" , S_P_UINT16},
	{"Gone", S_P_STRING, _defunct_option},
	{"NodeName", S_P_ARRAY, _parse_nodename, _destroy_nodename},
	{NULL}
};
static int _parse_nodename(void **dest)
{
	static s_p_options_t _nodename_options[] = {
		{"CPUs", S_P_UINT16},
		{NULL}
	};
	tbl = s_p_hashtbl_create(_nodename_options);
}
"""
    table = skt.file_table({"f.c": text}, "f.c", "opts")
    assert table == {
        "keys": {"Alpha": "string", "beta": "uint16", "Gone": "defunct", "NodeName": "array"},
        "lines": {"NodeName": {"CPUs": "uint16"}},
    }


def test_function_words_and_case_come_from_the_comparisons():
    text = """
static uint16_t _state(char *s)
{
	if (!xstrcasecmp(s, "ANY")) x = 1;
	else if (!xstrcasecmp(token, "IDLE")) x = 2;
}
int
other( char *s )
{
	if (xstrcmp(s, "NONE") == 0) {}
}
"""
    assert skt.literals(skt.function_body(text, "_state")) == ["ANY", "IDLE"]
    assert skt.ignores_case(skt.function_body(text, "_state"))
    assert not skt.ignores_case(skt.function_body(text, "other"))
    with pytest.raises(skt.ExtractError, match="function missing not found"):
        skt.function_body(text, "missing")
