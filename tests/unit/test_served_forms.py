"""README.md's table of what each served name runs in each config set is the one the configs
give (tests/served_forms.py), and it names what the configs say."""

from __future__ import annotations

from tests import served_forms


def test_the_readme_table_is_current() -> None:
    text = served_forms.README.read_text()
    assert served_forms.rendered(text) == text, "stale: run python -m tests.served_forms"


def test_the_table_says_what_the_cpu_configs_run() -> None:
    """The one-step CPU model of a described pipeline, the ensemble whose core is a TensorRT
    plan on the GPU, and the session model that calls its core, read from the configs."""
    assert served_forms.form("click_lightgbm", "cpu").startswith("one Python model: preprocess")
    assert "`text_embedding_encoder` (TensorRT plan)" in served_forms.form(
        "text_embedding", "default"
    )
    assert "calls `ctr_model` (ONNX Runtime on CPU)" in served_forms.form("ctr_session", "cpu")
    rows = served_forms.table().splitlines()[2:]
    assert len(rows) == len(served_forms.served_models(served_forms.MODEL_REPOSITORY, "cpu"))
