"""README.md's config reference is generated from the models; this keeps them equal."""

from pathlib import Path

from model.config_doc import reference_table

README = Path(__file__).resolve().parents[2] / "README.md"
BEGIN, END = "<!-- config-reference:begin -->\n", "<!-- config-reference:end -->"


def test_readme_config_reference_matches_models():
    text = README.read_text()
    assert BEGIN in text and END in text, "README.md lost its config-reference markers"
    current = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert current == reference_table(), (
        "README config reference is stale: regenerate it with `python -m model.config_doc`"
    )


def test_every_field_is_described():
    for line in reference_table().splitlines()[2:]:
        assert not line.rstrip().endswith("|  |"), f"field without a description: {line}"
