"""Client-side checks before sending (tritonrepo_client.validation), without a server; the
same cases against the real server are in test_reliability.py."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo_client.validation import (
    MAX_NUMERIC_CORRELATION_ID,
    InvalidCorrelationId,
    InvalidOverride,
    check_config,
    check_correlation_id,
    check_files,
    parse_correlation_id,
    read_config_file,
)
from tritonrepo_format.config_sets import config_path
from tritonrepo_format.configs import load_config

PY_CONFIG = {"name": "m", "backend": "python"}


def test_every_repository_config_passes_as_json():
    from google.protobuf import json_format

    for folder in sorted(p for p in MODEL_REPOSITORY.iterdir() if p.is_dir()):
        cfg = load_config(config_path(MODEL_REPOSITORY, folder.name, "cpu"))
        check_config(json_format.MessageToDict(cfg, preserving_proto_field_name=True))


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"input": [{"name": "X", "data_type": "INT64"}]}, "ModelConfig.input[0].data_type"),
        ({"inputs": []}, "inputs"),
        ({"max_batch_size": "many"}, "max_batch_size"),
    ],
)
def test_wrong_schema_names_the_source_and_field(config, field):
    with pytest.raises(InvalidOverride, match=r"my\.json") as info:
        check_config(config, "my.json")
    assert field in str(info.value)


def test_not_json_names_file_line_and_column(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{\n  "name": x}')
    with pytest.raises(InvalidOverride, match=r"c.json: not JSON: .* line 2 column 11"):
        read_config_file(path)
    path.write_text(json.dumps([1]))
    with pytest.raises(InvalidOverride, match="JSON object"):
        read_config_file(path)


def test_python_override_files_need_model_py_in_each_version():
    check_files(PY_CONFIG, {"file:1/model.py": b"", "file:1/x.json": b""}, "s")
    with pytest.raises(InvalidOverride, match=r"version\(s\) 2 have no model.py"):
        check_files(PY_CONFIG, {"file:1/model.py": b"", "file:2/x.json": b""}, "s")
    check_files({"backend": "onnxruntime_python"}, {"file:1/model.onnx": b""}, "s")
    with pytest.raises(InvalidOverride, match="file:<version>/<path>"):
        check_files(PY_CONFIG, {"1/model.py": b""}, "s")


@given(st.integers(min_value=1, max_value=MAX_NUMERIC_CORRELATION_ID))
def test_numeric_ids_in_range_pass(value):
    assert check_correlation_id(value) == value
    assert parse_correlation_id(str(value)) == value


@given(st.one_of(st.integers(max_value=0), st.integers(min_value=MAX_NUMERIC_CORRELATION_ID + 1)))
def test_numeric_ids_out_of_range_are_refused(value):
    with pytest.raises(InvalidCorrelationId, match="out of range"):
        check_correlation_id(value)


@given(st.text(min_size=1).filter(lambda t: len(t.encode()) <= 128 and not t.isdigit()))
def test_string_ids_up_to_128_bytes_pass(value):
    assert parse_correlation_id(value) == value


def test_string_ids_are_measured_in_utf8_bytes():
    check_correlation_id("é" * 64)  # 128 bytes
    with pytest.raises(InvalidCorrelationId, match="130 bytes"):
        check_correlation_id("é" * 65)
    with pytest.raises(InvalidCorrelationId, match="0 bytes"):
        check_correlation_id("")
    with pytest.raises(InvalidCorrelationId, match="int or a str"):
        check_correlation_id(True)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_url_with_a_scheme_is_refused_before_connecting(protocol):
    from tritonrepo_client import EmbeddingClient

    with pytest.raises(ValueError, match="without a scheme"):
        EmbeddingClient("http://127.0.0.1:8000", protocol)


@pytest.mark.parametrize("value", ["0", "-1"])
def test_cli_refuses_a_timeout_that_is_not_positive(value, capsys):
    from tritonrepo_client.cli.app import main

    assert main(["--timeout", value, "health"]) == 2
    assert "--timeout must be > 0 seconds" in capsys.readouterr().err
