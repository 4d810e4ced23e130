"""The generic client's checks and the ``infer`` command's parsing and output, without a server.

The metadata and config answers below are written as Triton 2.51 sends them (KServe v2
model metadata: ``shape`` with the batch dim as -1; gRPC's protobuf JSON: int64 fields as
strings, a 0 ``max_batch_size`` left out), for the shapes of ``text_embedding`` and of the
ONNX encoder behind it (model_repository/*/config.pbtxt).
"""

from __future__ import annotations

import argparse
import json
import re
import warnings

import numpy as np
import pytest

from tritonrepo_client.cli.infer import (
    format_outputs,
    input_argument,
    jsonable,
    load_inputs,
    load_value,
    npy_array,
    write_outputs,
)
from tritonrepo_client.pipeline_requests import (
    names_version_not_loaded,
    prepare_inputs,
    requested_outputs,
    signature_of,
    version_text,
)

EMBEDDING_METADATA = {
    "name": "text_embedding",
    "versions": ["1"],
    "platform": "ensemble",
    "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [-1, 1]}],
    "outputs": [{"name": "EMBEDDING", "datatype": "FP32", "shape": [-1, 384]}],
}
EMBEDDING_CONFIG = {"name": "text_embedding", "max_batch_size": 64, "input": [{"name": "TEXT"}]}
# gRPC (as_json=True): the same model, shapes as strings, the config wrapped by the caller.
ENCODER_GRPC_METADATA = {
    "name": "text_embedding_encoder",
    "versions": ["1"],
    "platform": "onnxruntime_onnx",
    "inputs": [
        {"name": "input_ids", "datatype": "INT64", "shape": ["-1", "-1"]},
        {"name": "attention_mask", "datatype": "INT64", "shape": ["-1", "-1"]},
        {"name": "token_type_ids", "datatype": "INT64", "shape": ["-1", "-1"]},
    ],
    "outputs": [{"name": "sentence_embedding", "datatype": "FP32", "shape": ["-1", "384"]}],
}
ENCODER_GRPC_CONFIG = {
    "name": "text_embedding_encoder",
    "max_batch_size": 64,
    "input": [
        {"name": "input_ids", "dims": ["-1"]},
        {"name": "attention_mask", "dims": ["-1"]},
        {"name": "token_type_ids", "dims": ["-1"], "optional": True},
    ],
}
# A model without batching (gRPC JSON leaves max_batch_size 0 out).
UNBATCHED_METADATA = {
    "name": "scorer",
    "inputs": [
        {"name": "X", "datatype": "FP32", "shape": [3, 2]},
        {"name": "K", "datatype": "INT8", "shape": [1]},
        {"name": "FLAG", "datatype": "BOOL", "shape": [1]},
        {"name": "H", "datatype": "BF16", "shape": [1]},
    ],
    "outputs": [{"name": "Y", "datatype": "FP32", "shape": [3]}],
}


@pytest.fixture
def embedding():
    return signature_of(EMBEDDING_METADATA, EMBEDDING_CONFIG)


@pytest.fixture
def encoder():
    return signature_of(ENCODER_GRPC_METADATA, ENCODER_GRPC_CONFIG, "1")


@pytest.fixture
def unbatched():
    return signature_of(
        UNBATCHED_METADATA, {"name": "scorer", "input": [{"name": "H", "optional": True}]}
    )


# --- signatures ----------------------------------------------------------------------------
def test_the_signature_is_read_from_http_and_grpc_answers(embedding, encoder, unbatched):
    assert embedding.max_batch_size == 64 and embedding.version == ""
    assert [(t.name, t.datatype, t.shape, t.batched) for t in embedding.inputs] == [
        ("TEXT", "BYTES", (-1, 1), True)
    ]
    assert embedding.output_names() == ["EMBEDDING"]
    assert encoder.version == "1" and encoder.inputs[0].shape == (-1, -1)
    assert encoder.outputs[0].shape == (-1, 384)
    assert [t.optional for t in encoder.inputs] == [False, False, True]
    assert unbatched.max_batch_size == 0 and not unbatched.inputs[0].batched
    assert embedding.describe().splitlines() == [
        "model 'text_embedding' (max_batch_size 64)",
        "  input TEXT BYTES [batch, 1]",
        "  output EMBEDDING FP32 [batch, 384]",
    ]
    assert encoder.inputs[2].describe() == "token_type_ids INT64 [batch, *]"


def test_an_answer_that_is_not_metadata_is_refused():
    with pytest.raises(ValueError, match=r"entry without name"):
        signature_of({"name": "m", "inputs": [{"shape": [1]}]}, {})


# --- inputs --------------------------------------------------------------------------------
def test_text_becomes_an_object_array_of_utf8_bytes(embedding):
    sent = prepare_inputs(embedding, {"TEXT": [["hello"], ["Ünïcödé"]]})
    assert sent["TEXT"].dtype == object and sent["TEXT"].shape == (2, 1)
    assert sent["TEXT"].tolist() == [[b"hello"], ["Ünïcödé".encode()]]
    raw = prepare_inputs(embedding, {"TEXT": np.array([[b"\xff"]], dtype=object)})
    assert raw["TEXT"].tolist() == [[b"\xff"]]
    unicode = prepare_inputs(embedding, {"TEXT": np.array([["a"]])})  # dtype <U1
    assert unicode["TEXT"].tolist() == [[b"a"]]


def test_an_unknown_input_is_named_with_the_inputs_and_a_suggestion(embedding):
    with pytest.raises(ValueError) as info:
        prepare_inputs(embedding, {"TXT": [["hello"]]})
    message = str(info.value)
    assert "model 'text_embedding' has no input 'TXT'" in message
    assert "did you mean 'TEXT'?" in message and "TEXT BYTES [batch, 1]" in message


def test_a_missing_input_is_named_and_an_optional_one_may_be_left_out(encoder):
    ids = np.array([[101, 7592, 102]])
    with pytest.raises(ValueError, match=r"needs input\(s\) missing here: attention_mask INT64"):
        prepare_inputs(encoder, {"input_ids": ids})
    sent = prepare_inputs(encoder, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
    assert sorted(sent) == ["attention_mask", "input_ids"]
    assert sent["input_ids"].dtype == np.int64


def test_numbers_are_not_text_and_text_is_not_numbers(embedding, encoder):
    with pytest.raises(ValueError, match=r"input TEXT is BYTES .* got a int64 array: pass str"):
        prepare_inputs(embedding, {"TEXT": np.array([[1]])})
    with pytest.raises(ValueError, match=r"item 1 .* is int 2, not str or bytes"):
        prepare_inputs(embedding, {"TEXT": [["one"], [2]]})  # not silently "2"
    with pytest.raises(ValueError, match=r"input input_ids is INT64 .* got <U5 values"):
        prepare_inputs(encoder, {"input_ids": [["hello"]], "attention_mask": [[1]]})


def test_dtypes_are_cast_only_when_no_value_changes_meaning(unbatched):
    x = [[1, 2], [3, 4], [5, 6]]  # JSON integers: int64
    good = {"X": x, "K": [7], "FLAG": [True]}
    sent = prepare_inputs(unbatched, good)
    assert sent["X"].dtype == np.float32 and sent["K"].dtype == np.int8
    assert sent["FLAG"].dtype == np.bool_
    np.testing.assert_array_equal(sent["X"], np.array(x, dtype=np.float32))
    with pytest.raises(ValueError, match=r"input K is INT8 \(int8\): value 1.5 at index \[0\] has"):
        prepare_inputs(unbatched, good | {"K": [1.5]})
    with pytest.raises(
        ValueError, match=r"input K is INT8 .* value 300 at index \[0\] is outside .*-128..127"
    ):
        prepare_inputs(unbatched, good | {"K": [300]})
    with pytest.raises(ValueError, match=r"input FLAG is BOOL .* got int64: pass true/false"):
        prepare_inputs(unbatched, good | {"FLAG": [1]})
    with pytest.raises(ValueError, match=r"input X is FP32 .* got bool: pass numbers"):
        prepare_inputs(unbatched, good | {"X": np.ones((3, 2), dtype=bool)})
    with pytest.raises(ValueError, match=r"input H is BF16, which this client cannot send"):
        prepare_inputs(unbatched, good | {"H": [1.0]})


# One unbatched input per datatype, each optional: a request gives one of them.
CASTS_METADATA = {
    "name": "casts",
    "inputs": [
        {"name": name, "datatype": datatype, "shape": [-1]}
        for name, datatype in (
            ("F16", "FP16"), ("F32", "FP32"), ("F64", "FP64"), ("I8", "INT8"),
            ("I32", "INT32"), ("I64", "INT64"), ("U8", "UINT8"),
        )
    ],
    "outputs": [{"name": "Y", "datatype": "FP32", "shape": [1]}],
}  # fmt: skip
CASTS_CONFIG = {"input": [{"name": t["name"], "optional": True} for t in CASTS_METADATA["inputs"]]}


@pytest.fixture
def casts():
    return signature_of(CASTS_METADATA, CASTS_CONFIG)


def sent_quietly(signature, inputs) -> dict[str, np.ndarray]:
    """``prepare_inputs`` with every warning an error (numpy's overflow warnings included)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return prepare_inputs(signature, inputs)


# IEEE 754 binary16 / binary32: largest finite values 65504 and (2 - 2**-23) * 2**127; a value
# rounds to the largest below half a unit past it (65520 for binary16) and to inf from there.
FP16_MAX, FP32_MAX = 65504.0, (2 - 2**-23) * 2.0**127


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("F32", [0.5, 1e40], r"1e\+40 at index \[1\]"),
        ("F32", [-1e39, 1e39], r"-1e\+39 at index \[0\] \(1 more\)"),
        ("F16", [65520.0], r"65520.0 at index \[0\]"),
        ("F16", [70000], r"70000 at index \[0\]"),  # an integer too
        ("F16", np.array([1e5], dtype=np.float32), r"100000.0 at index \[0\]"),
    ],
)
def test_a_finite_value_beyond_a_float_type_is_refused_not_sent_as_inf(casts, name, value, shown):
    datatype = {"F16": "FP16", "F32": "FP32"}[name]
    largest = {"F16": "65504", "F32": "3.4028235e\\+38"}[name]
    with pytest.raises(ValueError) as info:
        sent_quietly(casts, {name: value})
    assert re.match(
        rf"input {name} is {datatype} \(float(16|32)\): value {shown} is beyond its largest "
        rf"value {largest} and would become inf",
        str(info.value),
    ), str(info.value)


def test_values_a_float_type_holds_are_rounded_and_nan_and_inf_pass_as_given(casts):
    sent = sent_quietly(casts, {"F16": [FP16_MAX, 65519.0, -65519.0, 1.0e-9]})
    assert sent["F16"].dtype == np.float16
    assert sent["F16"].tolist() == [FP16_MAX, FP16_MAX, -FP16_MAX, 0.0]  # nearest binary16
    sent = sent_quietly(casts, {"F32": [FP32_MAX, 0.1, float("nan"), float("inf"), -np.inf]})
    got = sent["F32"]
    assert got.dtype == np.float32 and got[0] == np.float32(FP32_MAX) and np.isfinite(got[0])
    assert got[1] == np.float32(0.1) and np.isnan(got[2]) and got[3] == np.inf == -got[4]
    assert sent_quietly(casts, {"F64": [2**62 + 1]})["F64"].tolist() == [float(2**62)]


def test_floats_become_integers_only_when_whole_and_in_range(casts):
    sent = sent_quietly(casts, {"I32": [2.0, -3.0, 2.0**31 - 1, -(2.0**31)]})
    assert sent["I32"].dtype == np.int32
    assert sent["I32"].tolist() == [2, -3, 2**31 - 1, -(2**31)]
    assert sent_quietly(casts, {"I64": [-(2.0**63)]})["I64"].tolist() == [-(2**63)]
    refused = {
        "I32": ([1.0, 2.5], r"value 2.5 at index \[1\] has a fraction; pass integers"),
        "I8": ([float("nan")], r"value nan at index \[0\] is not a number it can hold"),
        "U8": ([float("-inf")], r"value -inf at index \[0\] is not a number it can hold"),
    }
    for name, (value, words) in refused.items():
        with pytest.raises(ValueError, match=rf"input {name} is .*: {words}"):
            sent_quietly(casts, {name: value})
    for name, value, limits in (
        ("I32", 2.0**31, "-2147483648..2147483647"),
        ("I64", 2.0**63, "-9223372036854775808..9223372036854775807"),  # float(2**63 - 1)
        ("U8", -1.0, "0..255"),
    ):
        with pytest.raises(ValueError, match=rf"input {name} .* is outside its range {limits}"):
            sent_quietly(casts, {name: [value]})


def test_integers_out_of_an_integer_types_range_are_refused(casts):
    assert sent_quietly(casts, {"U8": [0, 255]})["U8"].tolist() == [0, 255]
    for name, value, limits in (
        ("I32", [1, 2**31], r"2147483648 at index \[1\] is outside its range -2147483648"),
        ("I8", np.array([-129], dtype=np.int16), r"-129 at index \[0\] is outside .*-128..127"),
        ("U8", [-1, 256], r"-1 at index \[0\] \(1 more\) is outside its range 0..255"),
        ("I64", np.array([2**63], dtype=np.uint64), r"9223372036854775808 at index \[0\]"),
    ):
        with pytest.raises(ValueError, match=rf"input {name} is .*: value {limits}"):
            sent_quietly(casts, {name: value})


def test_the_infer_command_refuses_a_json_number_beyond_float64():
    with pytest.raises(ValueError, match=r"--input X: 1e400 is beyond the largest float"):
        load_value("X", "[[1.0, 1e400]]")
    assert np.isinf(load_value("X", "[[Infinity, -Infinity]]")).all()  # given as such
    assert np.isnan(load_value("X", "[[NaN]]")[0][0])


def test_shapes_must_match_the_dims_and_minus_one_is_free(embedding, encoder, unbatched):
    with pytest.raises(ValueError) as info:
        prepare_inputs(embedding, {"TEXT": ["hello"]})
    assert str(info.value).startswith(
        "input TEXT: expected 2 dims (TEXT BYTES [batch, 1]; the first dim is the batch (1..64))"
        ", got shape [1] (1 dims)"
    )
    assert "np.reshape(value, [-1, 1])" in str(info.value)
    with pytest.raises(ValueError, match=r"input TEXT: dim 1 must be 1, got 2 \(shape \[1, 2\]"):
        prepare_inputs(embedding, {"TEXT": [["a", "b"]]})
    long = np.ones((2, 300), dtype=np.int64)  # any sequence length
    assert prepare_inputs(encoder, {"input_ids": long, "attention_mask": long})
    with pytest.raises(ValueError, match=r"input X: dim 0 must be 3, got 2"):
        prepare_inputs(unbatched, {"X": np.zeros((2, 2)), "K": [1], "FLAG": [True]})


def test_the_batch_dim_is_one_to_max_batch_size_and_equal_across_inputs(embedding, encoder):
    with pytest.raises(ValueError, match=r"batch of 65 items .* 1 to 64 per request: send at most"):
        prepare_inputs(embedding, {"TEXT": [["x"]] * 65})
    with pytest.raises(ValueError, match=r"batch of 0 items"):
        prepare_inputs(embedding, {"TEXT": np.zeros((0, 1), dtype=object)})
    assert prepare_inputs(embedding, {"TEXT": [["x"]] * 64})["TEXT"].shape == (64, 1)
    with pytest.raises(
        ValueError, match=r"same batch size .*: input_ids has 2, attention_mask has 3"
    ):
        prepare_inputs(
            encoder,
            {"input_ids": np.ones((2, 4), np.int64), "attention_mask": np.ones((3, 4), np.int64)},
        )


def test_ragged_values_and_non_mappings_are_named(embedding):
    with pytest.raises(ValueError, match=r"input TEXT: not a rectangular array"):
        prepare_inputs(embedding, {"TEXT": [["a"], ["b", "c"]]})
    with pytest.raises(ValueError, match=r"takes a mapping \{input name: array\}, got list"):
        prepare_inputs(embedding, [["hello"]])  # type: ignore[arg-type]


# --- outputs and versions ------------------------------------------------------------------
def test_outputs_default_to_all_and_are_checked(encoder, embedding):
    assert requested_outputs(embedding, None) == ["EMBEDDING"]
    assert requested_outputs(embedding, ["EMBEDDING", "EMBEDDING"]) == ["EMBEDDING"]
    with pytest.raises(ValueError, match=r"has no output 'EMBEDDINGS': did you mean 'EMBEDDING'"):
        requested_outputs(embedding, ["EMBEDDINGS"])
    with pytest.raises(ValueError, match=r"got one string 'EMBEDDING': pass \['EMBEDDING'\]"):
        requested_outputs(embedding, "EMBEDDING")
    with pytest.raises(ValueError, match=r"outputs is empty"):
        requested_outputs(encoder, [])


def test_versions():
    assert version_text(None) == "" and version_text(2) == "2" and version_text("3") == "3"
    for bad in ("latest", 0, "-1", True, 1.5):
        with pytest.raises(ValueError, match=r"model_version"):
            version_text(bad)  # type: ignore[arg-type]
    # Triton 2.51's texts (model_lifecycle.cc ModelLifeCycle::GetModel).
    assert names_version_not_loaded(
        RuntimeError("Request for unknown model: 'text_embedding' version 7 is not found")
    )
    assert names_version_not_loaded(RuntimeError("'m' version 2 is not at ready state"))
    assert not names_version_not_loaded(RuntimeError("unexpected inference input 'TXT'"))


# --- the infer command's values ------------------------------------------------------------
def test_input_arguments_split_at_the_first_equals_sign():
    assert input_argument('TEXT=[["a=b"]]') == ("TEXT", '[["a=b"]]')
    for bad in ("TEXT", "=[1]", "TEXT="):
        with pytest.raises(argparse.ArgumentTypeError, match=r"expected NAME=VALUE"):
            input_argument(bad)


def test_values_are_json_literals_or_files(tmp_path):
    assert load_value("TEXT", '[["hello"]]') == [["hello"]]
    with pytest.raises(ValueError, match=r"--input TEXT: the value is not JSON .* quote it"):
        load_value("TEXT", "[[hello]]")
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "x.npy", array)
    loaded = load_value("X", f"@{tmp_path / 'x.npy'}")
    assert loaded.dtype == np.float32
    np.testing.assert_array_equal(loaded, array)
    np.save(tmp_path / "texts.npy", np.array([["a"], ["b"]], dtype=str))
    assert load_value("T", f"@{tmp_path / 'texts.npy'}").tolist() == [["a"], ["b"]]
    (tmp_path / "x.json").write_text('{"not": "a list"')
    with pytest.raises(ValueError, match=r"x.json is not JSON .*line 1"):
        load_value("X", f"@{tmp_path / 'x.json'}")
    (tmp_path / "y.json").write_text("[[1, 2]]")
    assert load_value("Y", f"@{tmp_path / 'y.json'}") == [[1, 2]]
    np.save(tmp_path / "objects.npy", np.array([["a"]], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=r"holds Python objects .* np.array\(texts, dtype=str\)"):
        load_value("T", f"@{tmp_path / 'objects.npy'}")
    # Any other file is one BYTES item: its raw bytes (an image), a batch of one.
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8\xff\x00 not text")
    assert load_value("IMAGE", f"@{tmp_path / 'photo.jpg'}") == [[b"\xff\xd8\xff\x00 not text"]]
    # ...and so is {"base64": ...} in JSON, the form binary outputs are printed in.
    assert load_value("IMAGE", '[[{"base64": "//4="}, "text"]]') == [[b"\xff\xfe", "text"]]
    (tmp_path / "b.json").write_text('[[{"base64": "//4="}]]')
    assert load_value("IMAGE", f"@{tmp_path / 'b.json'}") == [[b"\xff\xfe"]]
    with pytest.raises(ValueError, match=r"--input IMAGE: a base64 item is not base64"):
        load_value("IMAGE", '[[{"base64": "not base64!"}]]')
    assert load_value("X", '[[{"other": 1}]]') == [[{"other": 1}]]  # refused later, by dtype
    with pytest.raises(OSError):
        load_value("T", f"@{tmp_path / 'missing.npy'}")
    with pytest.raises(ValueError, match=r"--input A is given twice"):
        load_inputs([("A", "[1]"), ("A", "[2]")])


def test_outputs_print_as_one_json_object_with_text_decoded():
    answers = {
        "LABELS": np.array([[b"tabby cat", b"\xff\xfe"]], dtype=object),
        "SCORES": np.array([[0.5, 0.25]], dtype=np.float32),
        "IDS": np.array([3], dtype=np.int64),
    }
    assert jsonable(answers["LABELS"]) == [["tabby cat", {"base64": "//4="}]]
    assert json.loads(format_outputs(answers)) == {
        "LABELS": [["tabby cat", {"base64": "//4="}]],
        "SCORES": [[0.5, 0.25]],
        "IDS": [3],
    }
    assert format_outputs({"T": np.array([["Ünï"]], dtype=object)}) == '{"T": [["Ünï"]]}'


def test_float32_outputs_print_with_their_own_digits_and_read_back_exactly():
    progression = np.array([[206.11666870117188], [68.07103729248047]], dtype=np.float32)
    assert format_outputs({"P": progression}) == '{"P": [[206.11667], [68.07104]]}'
    assert format_outputs({"H": np.array([0.1], np.float16)}) == '{"H": [0.1]}'
    assert format_outputs({"D": np.array([0.1 + 0.2])}) == '{"D": [0.30000000000000004]}'
    assert format_outputs({"S": np.float32(2.5) * np.ones((), np.float32)}) == '{"S": 2.5}'
    values = np.random.default_rng(0).standard_normal((50, 40)).astype(np.float32) * 1e3
    values[0, :3] = [np.float32(1e-38), np.finfo(np.float32).max, -0.0]
    back = np.array(json.loads(format_outputs({"V": values}))["V"], dtype=np.float32)
    np.testing.assert_array_equal(back, values)  # every value parses back to itself


def test_outputs_are_written_as_npy_files_without_pickles(tmp_path):
    answers = {
        "EMBEDDING": np.ones((2, 3), dtype=np.float32),
        "LABELS": np.array([[b"cat"], ["Ünï".encode()]], dtype=object),
        "RAW": np.array([b"\xff"], dtype=object),
    }
    paths = write_outputs(answers, tmp_path / "out")
    assert [p.name for p in paths] == ["EMBEDDING.npy", "LABELS.npy", "RAW.npy"]
    back = {p.stem: np.load(p, allow_pickle=False) for p in paths}
    np.testing.assert_array_equal(back["EMBEDDING"], answers["EMBEDDING"])
    assert back["LABELS"].tolist() == [["cat"], ["Ünï"]]
    assert back["RAW"].tolist() == [b"\xff"]
    assert npy_array(answers["EMBEDDING"]) is answers["EMBEDDING"]
    for bad in ("../x", ".hidden", "a/b"):
        with pytest.raises(ValueError, match=r"is not a plain file name"):
            write_outputs({bad: np.ones(1)}, tmp_path / "bad")
