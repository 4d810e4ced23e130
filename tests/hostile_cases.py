"""A catalogue of hostile requests, as data: what each sends, where it comes from (a Triton
fix, a QA test), and what it does to the embedded Triton 2.51 server direct and behind the HTTP
guard (``tritonrepo.server.http_guard``).

Each :class:`~tests.hostile_requests.Case` sends one request with ``case.send(host, port)`` (the
HTTP port, or the gRPC port for ``protocol == "grpc"``) and states two outcomes: ``direct`` on
2.51 as it ships, and ``guarded`` behind the guard (None for gRPC: the guard is HTTP only).
``tests/server/test_hostile.py`` runs every case on a throwaway server and asserts the stated
outcome; its report (``build/hostile/report.md``) lists them all.

``fixed_in`` is the first Triton release that holds the fix: ``git tag --contains`` on
triton-inference-server/server, or a backport seen in the tag's source (2.59.1 holds the
classification and chunked-body fixes of 2.60.0). NGC containers (``build.py``
``TRITON_VERSION_MAP``): 2.51.0 = 24.10, 2.58.0 = 25.05, 2.59.1 = 25.07, 2.60.0 = 25.08,
2.65.0 = 26.01, 2.68.0 = 26.04, 2.69.0 = 26.05.
"""

# ruff: noqa: E501 - the catalogue is a table, one case per entry (fmt: skip)

from __future__ import annotations

import json
import signal
import struct

from tests import hostile_transport as t
from tests.hostile_requests import (
    GRPC_INVALID,
    GUARD_REFUSES,
    HTTP_CLIENT_ERROR,
    HTTP_JSON_ERROR,
    IMAGE,
    POSTPROCESS,
    RANKING,
    SESSION,
    SESSION_MODELS,
    SESSION_PARAMS,
    TEXT,
    Case,
    dies,
    grpc_classes,
    grpc_has,
    grpc_image,
    grpc_ranking,
    grpc_session,
    grpc_text,
    http_classes,
    http_has,
    image_binary,
    infer_path,
    post,
    post_binary,
    post_json,
    postprocess_binary,
    ranking_inputs,
    refused,
    served,
    session_inputs,
    shm_read_beyond_file,
    stub_dies,
    text_inputs,
)

PR = "triton-inference-server/server PR #"
TRITON_CHECK = "Triton's own request checks"
NOTHING = "nothing (Triton 2.51 has no check)"
ALIVE = served()  # guarded outcome of a request the guard passes on and Triton answers
# The guard refuses every request body with a Content-Encoding (no inflating, no bomb).
GUARD_NO_ENCODING = refused(frozenset({"415"}), "Content-Encoding")


# --- classification (docs/protocol/extension_classification.md) -------------------------------
def _classification() -> list[Case]:
    cls = "classification extension"
    cases = [
        Case("class_count_bytes_labels_http", "http", (IMAGE,), f"{PR}8267", "2.59.1",
             post_binary(IMAGE, image_binary([{"name": "LABELS", "parameters": {"classification": 3}}])),
             dies(signal.SIGFPE), GUARD_REFUSES, NOTHING),
        Case("class_count_bytes_labels_grpc", "grpc", (IMAGE,), f"{PR}8267", "2.59.1",
             grpc_image([("LABELS", 3)]), dies(signal.SIGFPE), None, NOTHING),
        Case("class_count_bytes_step_output_http", "http", (IMAGE,), f"{PR}8267", "2.59.1",
             post_binary(POSTPROCESS, postprocess_binary([{"name": "LABELS", "parameters": {"classification": 3}}])),
             dies(signal.SIGFPE), GUARD_REFUSES, NOTHING),
        Case("class_count_bytes_step_output_grpc", "grpc", (IMAGE,), f"{PR}8267", "2.59.1",
             _grpc_postprocess([("LABELS", 3)]), dies(signal.SIGFPE), None, NOTHING),
        Case("class_count_fp32_scores_http", "http", (IMAGE,), cls, "",
             post_binary(IMAGE, image_binary([{"name": "SCORES", "parameters": {"classification": 2}}])),
             served(), ALIVE, "works: FP32", lambda r: http_classes(r, "SCORES", 2)),
        Case("class_count_fp32_scores_grpc", "grpc", (IMAGE,), cls, "",
             grpc_image([("SCORES", 2)]), served(), None, "works: FP32",
             lambda r: grpc_classes(r, "SCORES", 2)),
        Case("class_count_fp32_embedding_http", "http", (TEXT,), cls, "",
             post_json(TEXT, text_inputs(), [{"name": "EMBEDDING", "parameters": {"classification": 3}}]),
             served(), ALIVE, "works: FP32", lambda r: http_classes(r, "EMBEDDING", 3)),
        Case("class_count_fp32_embedding_grpc", "grpc", (TEXT,), cls, "",
             grpc_text([("EMBEDDING", 3)]), served(), None, "works: FP32",
             lambda r: grpc_classes(r, "EMBEDDING", 3)),
        Case("class_count_int64_item_ids_http", "http", (RANKING,), cls, "",
             post_json(RANKING, ranking_inputs(), [{"name": "ITEM_IDS", "parameters": {"classification": 2}}]),
             served(), ALIVE, "works: INT64", lambda r: http_classes(r, "ITEM_IDS", 2)),
        Case("class_count_int64_item_ids_grpc", "grpc", (RANKING,), cls, "",
             grpc_ranking([("ITEM_IDS", 2)]), served(), None, "works: INT64",
             lambda r: grpc_classes(r, "ITEM_IDS", 2)),
        Case("class_count_fp32_session_scores_http", "http", SESSION_MODELS, cls, "",
             post_json(SESSION, session_inputs(), [{"name": "SCORES", "parameters": {"classification": 2}}], **SESSION_PARAMS),
             served(), ALIVE, "works: FP32", lambda r: http_classes(r, "SCORES", 2)),
        Case("class_count_int64_session_ids_grpc", "grpc", SESSION_MODELS, cls, "",
             grpc_session([("ITEM_IDS", 2)]), served(), None, "works: INT64",
             lambda r: grpc_classes(r, "ITEM_IDS", 2)),
        Case("class_count_huge_http", "http", (TEXT,), cls, "",
             post_json(TEXT, text_inputs(), [{"name": "EMBEDDING", "parameters": {"classification": 4294967295}}]),
             served("cut to the 384 elements"), ALIVE, "works: count cut to the tensor's size",
             lambda r: http_classes(r, "EMBEDDING", 384)),
        Case("class_count_string_http", "http", (TEXT,), cls, "",
             post_json(TEXT, text_inputs(), [{"name": "EMBEDDING", "parameters": {"classification": "x"}}]),
             refused(HTTP_JSON_ERROR, "classification"), GUARD_REFUSES, TRITON_CHECK),
        Case("class_count_negative_http", "http", (TEXT,), cls, "",
             post_json(TEXT, text_inputs(), [{"name": "EMBEDDING", "parameters": {"classification": -1}}]),
             refused(HTTP_JSON_ERROR, "classification"), GUARD_REFUSES, TRITON_CHECK),
    ]  # fmt: skip
    return cases


def _grpc_postprocess(outputs):
    import numpy as np

    logits = np.linspace(-3, 3, 1000, dtype=np.float32).reshape(1, 1000)
    tensors = [("logits", logits, None), ("K", np.array([[3]], dtype=np.int32), None)]
    return lambda host, port: t.grpc_infer(host, port, POSTPROCESS, tensors, outputs)


# --- bodies: chunked, compressed ------------------------------------------------------------
TEXT_BODY = t.json_body(text_inputs())


def _chunked(chunk_size: int, total: int):
    body = TEXT_BODY + b" " * (total - len(TEXT_BODY))
    head = t.head_of(
        infer_path(TEXT), {"Transfer-Encoding": "chunked", "Content-Type": "application/json"}
    )
    parts = t.chunked_parts(body, chunk_size)
    return lambda host, port: t.raw_request(host, port, head, parts)


def _encoded(encoding: str, data: bytes):
    return post(TEXT, data, {"Content-Encoding": encoding})


def _bomb(host: str, port: int):
    bomb = t.gzip_bomb(TEXT_BODY, 400 << 20)
    return t.http_request(host, port, infer_path(TEXT), bomb, {"Content-Encoding": "gzip"})


def _bodies() -> list[Case]:
    embedded = http_has("EMBEDDING")
    return [
        Case("chunked_1m_one_byte_chunks", "raw", (TEXT,), f"{PR}8305; {PR}8770 caps chunks in 2.69.0", "2.59.1",
             _chunked(1, 1_000_000), dies(signal.SIGSEGV), served("nginx joins the chunks"), NOTHING,
             embedded),
        Case("chunked_64k_one_byte_chunks", "raw", (TEXT,), f"{PR}8770 (cap 65536 chunks)", "",
             _chunked(1, 60_000), served(), ALIVE, "works", embedded),
        Case("chunked_few_chunks", "raw", (TEXT,), "RFC 9112 7.1", "",
             _chunked(64, 4096), served(), ALIVE, "works", embedded),
        Case("gzip_body", "http", (TEXT,), "Triton HTTP compression (inference_protocols.md)", "",
             _encoded("gzip", t.gzip_bytes(TEXT_BODY)), served(), GUARD_NO_ENCODING, "works", embedded),
        Case("deflate_body", "http", (TEXT,), "Triton HTTP compression (inference_protocols.md)", "",
             _encoded("deflate", t.deflate_bytes(TEXT_BODY)), served(), GUARD_NO_ENCODING, "works", embedded),
        Case("gzip_bomb_400kb_to_400mb", "http", (TEXT,), f"{PR}8570", "2.65.0", _bomb,
             served("400 MB inflated and held"), GUARD_NO_ENCODING, NOTHING, embedded),
        Case("gzip_header_plain_body", "http", (TEXT,), f"{PR}8764", "",
             _encoded("gzip", TEXT_BODY), served("the plain body is read as it is"), GUARD_NO_ENCODING,
             "harmless: Triton reads a body that does not inflate as plain", embedded),
        Case("deflate_truncated", "http", (TEXT,), f"{PR}8764", "",
             _encoded("deflate", t.deflate_bytes(TEXT_BODY)[:20]), refused(HTTP_JSON_ERROR, "."),
             GUARD_NO_ENCODING, TRITON_CHECK),
    ]  # fmt: skip


# --- JSON shape: deep and wide -------------------------------------------------------------
def _deep(depth: int) -> bytes:
    prefix = b'{"inputs":[{"name":"TEXT","datatype":"BYTES","shape":[1,1],"data":'
    return prefix + b"[" * depth + b"]" * depth + b"}]}"


PARAMETER_KEYS = 10_000


def _json() -> list[Case]:
    wide = text_inputs(data=["x"] * 200_000)
    many_keys = json.dumps({f"k{i}": i for i in range(PARAMETER_KEYS)})
    params_body = (
        b'{"inputs":'
        + json.dumps(text_inputs()).encode()
        + b',"parameters":'
        + many_keys.encode()
        + b"}"
    )
    return [
        Case("json_depth_100000", "http", (TEXT,), f"{PR}8172", "2.58.0",
             post(TEXT, _deep(100_000)), dies(signal.SIGSEGV), GUARD_REFUSES, NOTHING),
        Case("json_depth_10000", "http", (TEXT,), f"{PR}8172", "2.58.0",
             post(TEXT, _deep(10_000)), refused(HTTP_JSON_ERROR, "."), GUARD_REFUSES, TRITON_CHECK),
        Case("json_wide_data_200k_elements", "http", (TEXT,), f"{PR}8432", "",
             post_json(TEXT, wide), refused(HTTP_JSON_ERROR, "shape|element|data"),
             GUARD_REFUSES, TRITON_CHECK),
        Case(f"json_{PARAMETER_KEYS}_parameters", "http", (TEXT,), f"{PR}8763", "",
             post(TEXT, params_body), served(), ALIVE, "works", http_has("EMBEDDING")),
        Case("json_malformed", "http", (TEXT,), "qa/L0_http", "",
             post(TEXT, b'{"inputs": [ {"name": '), refused(HTTP_JSON_ERROR, "parse|JSON"),
             GUARD_REFUSES, TRITON_CHECK),
    ]  # fmt: skip


# --- shapes and byte sizes ------------------------------------------------------------------
def _shapes() -> list[Case]:
    big = 2**32 + 1
    shape_msg = "shape|size|dims|element|unexpected"
    return [
        Case("json_int64_shape_2pow32_plus_1_ranking", "http", (RANKING,), f"{PR}8676", "2.68.0",
             post_json(RANKING, ranking_inputs([big, 2], [])), dies(signal.SIGABRT), GUARD_REFUSES, NOTHING),
        Case("json_int64_shape_2pow32_plus_1_session", "http", SESSION_MODELS, f"{PR}8676", "2.68.0",
             post_json(SESSION, session_inputs([big, 2], []), **SESSION_PARAMS),
             dies(signal.SIGABRT), GUARD_REFUSES, NOTHING),
        # [big, 8] INT32 = 137 GB: more than RAM, so the allocation fails at once. [big, 1]
        # (17 GB) fits Linux's overcommit and the process fills the machine's memory instead.
        Case("json_int32_shape_2pow32_plus_1_image", "http", (IMAGE,), f"{PR}8676", "2.68.0",
             post_json(IMAGE, [{"name": "TOP_K", "datatype": "INT32", "shape": [big, 8], "data": []}]),
             dies(signal.SIGABRT), GUARD_REFUSES, NOTHING),
        Case("json_bytes_shape_2pow32_plus_1_text", "http", (TEXT,), f"{PR}8676", "2.68.0",
             post_json(TEXT, text_inputs([big, 1], [])), refused(HTTP_JSON_ERROR, shape_msg),
             GUARD_REFUSES, TRITON_CHECK),
        Case("json_negative_dim", "http", (RANKING,), "qa/L0_input_validation", "",
             post_json(RANKING, ranking_inputs([-1], [1])), refused(HTTP_JSON_ERROR, shape_msg),
             GUARD_REFUSES, TRITON_CHECK),
        Case("json_shape_product_wraps_to_zero", "http", (RANKING,), f"{PR}8182, {PR}8619", "2.58.0",
             post_json(RANKING, ranking_inputs([2**32, 2**32], [])), refused(HTTP_JSON_ERROR, shape_msg),
             GUARD_REFUSES, TRITON_CHECK),
        # 2**62 INT64 elements = 2**65 bytes, which wraps to 0: the data is written into nothing.
        Case("json_int64_dim_2pow62", "http", (RANKING,), f"{PR}8676", "2.68.0",
             post_json(RANKING, ranking_inputs([2**62], [1])), dies(signal.SIGSEGV),
             GUARD_REFUSES, NOTHING),
        Case("binary_data_size_larger_than_body", "http", (IMAGE,), f"{PR}8174", "",
             post_binary(IMAGE, image_binary([{"name": "LABELS"}], size=1 << 30)),
             refused(HTTP_CLIENT_ERROR, "."), GUARD_REFUSES, TRITON_CHECK),
        Case("binary_data_size_smaller_than_element", "http", (IMAGE,), f"{PR}8174", "",
             post_binary(IMAGE, image_binary([{"name": "LABELS"}], size=2)),
             refused(HTTP_CLIENT_ERROR, "."), GUARD_REFUSES, TRITON_CHECK),
        Case("bytes_element_length_lies", "http", (IMAGE,), f"{PR}8769", "",
             post_binary(IMAGE, _lying_element()), refused(HTTP_CLIENT_ERROR, "."),
             GUARD_REFUSES, TRITON_CHECK),
        Case("header_length_larger_than_body", "http", (IMAGE,), f"{PR}8925", "",
             post_binary(IMAGE, image_binary([{"name": "LABELS"}]), header_length=1 << 20),
             refused(HTTP_CLIENT_ERROR, "inference header size"), GUARD_REFUSES, TRITON_CHECK),
        Case("header_length_smaller_than_header", "http", (IMAGE,), f"{PR}8925", "",
             post_binary(IMAGE, image_binary([{"name": "LABELS"}]), header_length=20),
             refused(HTTP_JSON_ERROR, "."), GUARD_REFUSES, TRITON_CHECK),
        Case("header_length_negative", "http", (IMAGE,), f"{PR}8925", "",
             post_binary(IMAGE, image_binary([{"name": "LABELS"}]), header_length=-5),
             refused(HTTP_CLIENT_ERROR, "inference header size"), GUARD_REFUSES, TRITON_CHECK),
        Case("header_length_out_of_int_range", "http", (IMAGE,), f"{PR}8925", "",
             post_binary(IMAGE, image_binary([{"name": "LABELS"}]), header_length=99999999999),
             refused(HTTP_CLIENT_ERROR, "inference header size"), GUARD_REFUSES, TRITON_CHECK),
        Case("shm_region_registered_beyond_its_file", "http", (RANKING,), f"{PR}8335 (CVE-2025-23320 class)", "2.61.0",
             shm_read_beyond_file(RANKING, _shm_history), refused(frozenset({"403"}), "restricted"),
             refused(frozenset({"403"}), "restricted"),
             "the launcher's repository key restricts the shared-memory API"),
        Case("grpc_int64_shape_2pow32_plus_1", "grpc", (RANKING,), f"{PR}8676", "",
             grpc_ranking([("ITEM_IDS", 0)], history_shape=[2**32 + 1, 2]),
             refused(GRPC_INVALID, shape_msg), None, TRITON_CHECK),
        Case("grpc_raw_contents_shorter_than_shape", "grpc", (RANKING,), f"{PR}8174", "",
             _grpc_raw(RANKING, [("HISTORY", "INT64", [3], struct.pack("<q", 1)), *RANKING_RAW], ["ITEM_IDS"]),
             refused(GRPC_INVALID, "size|bytes|expect"), None, TRITON_CHECK),
        Case("grpc_raw_contents_longer_than_shape", "grpc", (RANKING,), f"{PR}8174", "",
             _grpc_raw(RANKING, [("HISTORY", "INT64", [1], struct.pack("<3q", 1, 2, 3)), *RANKING_RAW], ["ITEM_IDS"]),
             refused(GRPC_INVALID, "size|bytes|expect"), None, TRITON_CHECK),
        # 2**62 INT64 elements = 2**65 bytes, which wraps to 0: zero bytes pass Triton's size
        # check, and the Python backend's stub of ctr_preprocess dies reading the tensor.
        Case("grpc_int64_dim_2pow62_empty", "grpc", (RANKING,), f"{PR}8676, {PR}8689", "2.68.0",
             _grpc_raw(RANKING, [("HISTORY", "INT64", [2**62], b""), *RANKING_RAW], ["ITEM_IDS"]),
             stub_dies(frozenset({"StatusCode.INTERNAL"})), None, NOTHING),
        Case("binary_int64_dim_2pow62_empty", "http", (RANKING,), f"{PR}8676, {PR}8689", "2.68.0",
             post_binary(RANKING, _binary_history([2**62])), stub_dies(frozenset({"500"})),
             GUARD_REFUSES, NOTHING),
        Case("grpc_int64_dim_2pow62_one_element", "grpc", (RANKING,), f"{PR}8676, {PR}8689", "",
             _grpc_raw(RANKING, [("HISTORY", "INT64", [2**62], struct.pack("<q", 1)), *RANKING_RAW], ["ITEM_IDS"]),
             refused(GRPC_INVALID, "size|bytes|expect"), None, TRITON_CHECK),
        Case("grpc_bytes_element_length_lies", "grpc", (TEXT,), f"{PR}8769", "",
             _grpc_raw(TEXT, [("TEXT", "BYTES", [1, 1], struct.pack("<I", 1 << 30) + b"abc")], ["EMBEDDING"]),
             refused(GRPC_INVALID, "string|length|bytes"), None, TRITON_CHECK),
        Case("grpc_negative_dim", "grpc", (TEXT,), "qa/L0_input_validation", "",
             grpc_text([("EMBEDDING", 0)], shape=[-1, 1]), refused(GRPC_INVALID, shape_msg),
             None, TRITON_CHECK),
    ]  # fmt: skip


def _shm_history(params: dict) -> list[dict]:
    inputs = ranking_inputs()
    inputs[0] = {"name": "HISTORY", "datatype": "INT64", "shape": [3], "parameters": params}
    return inputs


RANKING_RAW = [
    ("CANDIDATES", "INT64", [3], struct.pack("<3q", 4, 5, 6)),
    ("TOP_K", "INT32", [1], struct.pack("<i", 2)),
]


def _binary_history(shape: list[int]) -> tuple[bytes, int]:
    """ctr_ranking with HISTORY sent in the binary extension, ``binary_data_size`` 0."""
    header = {
        "inputs": [
            {"name": "HISTORY", "datatype": "INT64", "shape": shape,
             "parameters": {"binary_data_size": 0}},
            *ranking_inputs()[1:],
        ],
        "outputs": [{"name": "ITEM_IDS"}],
    }  # fmt: skip
    return t.binary_body(header, [])


def _grpc_raw(model: str, inputs: list, outputs: list[str]):
    return lambda host, port: t.grpc_raw_infer(host, port, model, inputs, outputs)


def _lying_element() -> tuple[bytes, int]:
    """IMAGE whose one BYTES element claims 1 GB while 8 bytes follow."""
    element = struct.pack("<I", 1 << 30) + b"\x89PNG\r\n\x1a\n"
    header = {
        "inputs": [
            {"name": "IMAGE", "datatype": "BYTES", "shape": [1, 1],
             "parameters": {"binary_data_size": len(element)}},
        ],
        "outputs": [{"name": "LABELS"}],
    }  # fmt: skip
    return t.binary_body(header, [element])


# --- parameters of the wrong type ------------------------------------------------------------
def _parameters() -> list[Case]:
    out = [{"name": "EMBEDDING"}]
    param_msg = "parameter|priority|timeout|binary_data|sequence|correlation|parse|unable"

    def bad(name: str, **params):
        return Case(name, "http", (TEXT,), "qa/L0_http, inference_protocols.md parameters", "",
                    post_json(TEXT, text_inputs(), out, **params),
                    refused(HTTP_JSON_ERROR, param_msg), GUARD_REFUSES, TRITON_CHECK)  # fmt: skip

    session = [{"name": "SCORES"}]
    return [
        Case("binary_data_not_bool", "http", (TEXT,), "qa/L0_http", "",
             post_json(TEXT, text_inputs(), [{"name": "EMBEDDING", "parameters": {"binary_data": 5}}]),
             refused(HTTP_JSON_ERROR, param_msg), GUARD_REFUSES, TRITON_CHECK),
        bad("priority_negative", priority=-1),
        bad("priority_string", priority="high"),
        bad("timeout_string", timeout="x"),
        Case("sequence_id_list", "http", SESSION_MODELS, f"{PR}7919 (qa/L0_sequence_corrid_batcher)", "",
             post_json(SESSION, session_inputs(), session, sequence_id=[1], sequence_start=True, sequence_end=True),
             refused(HTTP_JSON_ERROR, param_msg), GUARD_REFUSES, TRITON_CHECK),
        Case("sequence_start_string", "http", SESSION_MODELS, "qa/L0_sequence_batcher", "",
             post_json(SESSION, session_inputs(), session, sequence_id=5, sequence_start="yes", sequence_end=True),
             refused(HTTP_JSON_ERROR, param_msg), GUARD_REFUSES, TRITON_CHECK),
        Case("sequence_id_zero", "http", SESSION_MODELS, "sequence batcher: 0 = no sequence", "",
             post_json(SESSION, session_inputs(), session, sequence_id=0, sequence_start=True, sequence_end=True),
             refused(HTTP_CLIENT_ERROR, "correlation|sequence"), GUARD_REFUSES, TRITON_CHECK),
        Case("grpc_correlation_id_too_long", "grpc", SESSION_MODELS, "seen on 2.51 (triton-facts)", "",
             grpc_session([("SCORES", 0)], sequence_id="x" * 200),
             refused(frozenset({"StatusCode.UNIMPLEMENTED", "StatusCode.INVALID_ARGUMENT"}), "."),
             None, TRITON_CHECK),
        Case("grpc_priority_huge", "grpc", (TEXT,), "model_config.proto priority_levels", "",
             grpc_text([("EMBEDDING", 0)], priority=2**63), served(), None, "works: ensemble passes any priority",
             grpc_has("EMBEDDING")),
    ]  # fmt: skip


# --- duplicated inputs and outputs ------------------------------------------------------------
def _duplicates() -> list[Case]:
    twice = text_inputs() + text_inputs()
    return [
        Case("duplicate_input_http", "http", (TEXT,), f"{PR}8741", "",
             post_json(TEXT, twice), refused(HTTP_JSON_ERROR, "TEXT|duplicate|already"),
             GUARD_REFUSES, TRITON_CHECK),
        # 2.51 answers an output listed twice, or 100,000 times, once (2.69 refuses it).
        Case("duplicate_output_http", "http", (TEXT,), f"{PR}8741", "2.69.0",
             post_json(TEXT, text_inputs(), [{"name": "EMBEDDING"}, {"name": "EMBEDDING"}]),
             served("answered once"), ALIVE, "harmless: Triton answers it once", http_has("EMBEDDING")),
        Case("duplicate_output_grpc", "grpc", (TEXT,), f"{PR}8741", "2.69.0",
             grpc_text([("EMBEDDING", 0), ("EMBEDDING", 0)]), served("answered once"),
             None, "harmless: Triton answers it once", grpc_has("EMBEDDING")),
        Case("output_listed_100000_times", "http", (TEXT,), f"{PR}8741 (CVE-2026-24146 class)", "2.69.0",
             post_json(TEXT, text_inputs(), [{"name": "EMBEDDING"}] * 100_000),
             served("answered once, in 0.2 s"), ALIVE, "harmless: Triton answers it once", http_has("EMBEDDING")),
        Case("unknown_output_http", "http", (TEXT,), "qa/L0_http", "",
             post_json(TEXT, text_inputs(), [{"name": "NOPE"}]), refused(HTTP_CLIENT_ERROR, "NOPE"),
             GUARD_REFUSES, TRITON_CHECK),
    ]  # fmt: skip


CASES: list[Case] = [
    *_classification(),
    *_bodies(),
    *_json(),
    *_shapes(),
    *_parameters(),
    *_duplicates(),
]

assert len({c.name for c in CASES}) == len(CASES), "case names must be unique"
