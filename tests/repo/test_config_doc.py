"""docs/config-reference.md's table is generated from the models; this keeps them equal."""

from model.config_doc import BEGIN, DOC, END, reference_table


def test_config_reference_matches_models():
    text = DOC.read_text()
    assert BEGIN in text and END in text, "docs/config-reference.md lost its config-reference markers"
    current = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert current == reference_table(), (
        "docs/config-reference.md is stale: regenerate it with `venv/bin/python -m model.config_doc --write`"
    )


def test_every_field_is_described():
    for line in reference_table().splitlines()[2:]:
        assert not line.rstrip().endswith("|  |"), f"field without a description: {line}"
