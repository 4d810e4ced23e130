"""Property-based fuzzing of every served pipeline through the real server (HTTP and gRPC).

Targets: ``text_embedding`` (random byte strings; wrong datatypes, shapes and batch sizes),
``ctr_ranking`` (random, out-of-range and extreme int64 ids, TOP_K edge cases; wrong datatypes
and shapes), ``ctr_session`` (a state machine of START/END/continue events over reused, unknown
and malformed correlation IDs) and raw HTTP/JSON bodies for both ensembles.

Property of every example: the request gets either a correct result (checked against an oracle
computed here, not by the code under test) or a clear error of its own (an
``InferenceServerException`` whose message names the problem, with a client-error status, never
a stub crash or an internal error); afterwards the server is ready, no Python-backend stub
process died or was restarted, and a known-good request gives the same answer as before (no
state leaks). The settings are fixed for CI (derandomized, no deadline); the number of cases
tried per target goes to ``build/fuzz/report.json``.
"""

from __future__ import annotations

import http.client
import json
import time
from collections import Counter
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test
from tritonclient.utils import InferenceServerException

from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import BUILD_DIR
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec as text_spec

pytestmark = pytest.mark.server

PROTOCOLS = ("http", "grpc")
REPORT_FILE = BUILD_DIR / "fuzz" / "report.json"
TEXT_TOLERANCE = 1e-5  # a text's embedding in a batch vs alone (the encoder packs rows)
CTR_TOLERANCE = 1e-5  # the same rows scored in two requests
INT64 = np.iinfo(np.int64)
INT32 = np.iinfo(np.int32)
# Phrases of a crash or a bug, never of a clear per-request error.
UNCLEAR = (
    "stub process",
    "not healthy",
    "internal error",
    "traceback",
    "segmentation",
    "core dumped",
    "std::",
    "exception",
)
# Status of an error that blames the request: what our steps (INVALID_ARG) and Triton's own
# input checks return. Only Triton's HTTP JSON parser answers 500 for a malformed field.
CLIENT_ERROR = {"400", "StatusCode.INVALID_ARGUMENT"}
JSON_PARSE_ERROR = {"500"}


def fuzz_settings(max_examples: int, **extra: Any) -> settings:
    """Fixed, CI-friendly hypothesis settings: the same examples on every run."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        **extra,
    )


# --- bookkeeping ------------------------------------------------------------------------------
@dataclass
class Tally:
    """Cases tried for one target: examples, requests sent, results and errors seen."""

    examples: int = 0
    requests: int = 0
    outcomes: Counter = field(default_factory=Counter)


TALLIES: dict[str, Tally] = {}


def tally(target: str) -> Tally:
    return TALLIES.setdefault(target, Tally())


# --- talking to the server --------------------------------------------------------------------
Tensor = tuple[str, np.ndarray, "list[int] | None"]  # name, data, declared shape if it lies


class Fuzzer:
    """Raw tritonclient HTTP and gRPC clients of one server, plus the health probes."""

    def __init__(self, server: TritonServer) -> None:
        self.server = server
        self.clients: dict[str, Any] = {
            "http": httpclient.InferenceServerClient(
                server.options.http_url, connection_timeout=120, network_timeout=120
            ),
            "grpc": grpcclient.InferenceServerClient(server.options.grpc_url),
        }
        self.stubs = self.stub_pids()
        self.known_good: dict[str, Any] = {}

    def stub_pids(self) -> dict[str, int]:
        return {stub.instance: stub.pid for stub in self.server.stub_processes()}

    def infer(
        self,
        target: str,
        protocol: str,
        model: str,
        tensors: list[Tensor],
        outputs: list[str],
        **kwargs: Any,
    ) -> dict[str, np.ndarray]:
        """One inference with each tensor's datatype taken from its numpy dtype and its shape
        declared as given (a declared shape that differs from the data is sent as is).

        Raises:
            InferenceServerException: the server's error.
        """
        module = httpclient if protocol == "http" else grpcclient
        inputs = []
        for name, array, declared in tensors:
            datatype = "BYTES" if array.dtype == object else _triton_dtype(array.dtype)
            tensor = module.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            if declared is not None:
                tensor.set_shape(declared)
            inputs.append(tensor)
        requested = [module.InferRequestedOutput(name) for name in outputs]
        tally(target).requests += 1
        result = self.clients[protocol].infer(model, inputs, outputs=requested, **kwargs)
        return {name: result.as_numpy(name) for name in outputs}

    def embed(self, target: str, protocol: str, texts: list[bytes]) -> np.ndarray:
        array = np.array([[t] for t in texts], dtype=object)
        out = self.infer(
            target, protocol, text_spec.ENSEMBLE, [("TEXT", array, None)], ["EMBEDDING"]
        )
        return out["EMBEDDING"]

    def rank(
        self,
        target: str,
        protocol: str,
        history: np.ndarray,
        candidates: np.ndarray,
        top_k: int | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        tensors: list[Tensor] = [
            ("HISTORY", np.asarray(history, np.int64), None),
            ("CANDIDATES", np.asarray(candidates, np.int64), None),
        ]
        if top_k is not None:
            tensors.append(("TOP_K", np.array([top_k], np.int32), None))
        out = self.infer(
            target, protocol, ctr_spec.RANKING_ENSEMBLE, tensors, ["ITEM_IDS", "SCORES"]
        )
        return out["ITEM_IDS"], out["SCORES"]

    def assert_healthy(self, target: str) -> None:
        """The server is ready, no stub died or restarted, and the known-good requests of the
        pipelines give the answers they gave before fuzzing started."""
        assert self.clients["http"].is_server_ready()
        assert self.stub_pids() == self.stubs, "a Python-backend stub died or was restarted"
        if "text" in self.known_good:
            got = self.embed(target, "grpc", [KNOWN_TEXT])
            np.testing.assert_allclose(got, self.known_good["text"], atol=1e-6, rtol=0)
        if "ranking" in self.known_good:
            ids, scores = self.rank(target, "http", *KNOWN_RANKING)
            np.testing.assert_array_equal(ids, self.known_good["ranking"][0])
            np.testing.assert_allclose(scores, self.known_good["ranking"][1], atol=1e-6, rtol=0)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def _triton_dtype(dtype: np.dtype) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(dtype)


KNOWN_TEXT = b"The quick brown fox jumps over the lazy dog."
KNOWN_RANKING = (np.array([5, 17, 300]), np.array([4, 8, 15, 16, 23, 42]), 4)


@pytest.fixture(scope="module")
def fuzzer(triton_server: TritonServer) -> Iterator[Fuzzer]:
    """Clients of the session's server with the known-good answers recorded before fuzzing."""
    fz = Fuzzer(triton_server)
    fz.known_good["text"] = fz.embed("setup", "http", [KNOWN_TEXT])
    fz.known_good["ranking"] = fz.rank("setup", "grpc", *KNOWN_RANKING)
    try:
        yield fz
        fz.assert_healthy("teardown")
    finally:
        fz.close()


def assert_clear_error(
    exc: InferenceServerException, names: tuple[str, ...], statuses: set[str] = CLIENT_ERROR
) -> str:
    """The error blames the request (status), names the problem (one of ``names`` appears in
    the message) and is no crash or internal error. Returns the message."""
    message = str(exc.message() or exc)
    lowered = message.lower()
    assert not any(marker in lowered for marker in UNCLEAR), message
    assert str(exc.status()) in statuses, f"status {exc.status()}: {message}"
    assert any(name in message for name in names), f"names none of {names}: {message}"
    return message


def record(target: str, outcome: str) -> None:
    tally(target).outcomes[outcome] += 1


# --- text_embedding: random bytes ---------------------------------------------------------------
LIMIT = text_spec.MAX_TEXT_BYTES


def _sized_text(unit: str, size: int) -> bytes:
    """``unit`` repeated and filled up with ``a`` to exactly ``size`` bytes of UTF-8."""
    raw = unit.encode()
    return raw * (size // len(raw)) + b"a" * (size % len(raw))


TEXT_ITEMS = st.one_of(
    st.binary(max_size=48),  # mostly invalid UTF-8
    st.text(max_size=40).map(str.encode),  # valid UTF-8, any code point (NUL included)
    st.builds(lambda t, n: t.encode() + b"\0" * n, st.text(max_size=16), st.integers(1, 8)),
    st.builds(  # around the size limit, multi-byte units, NUL runs
        _sized_text,
        st.sampled_from(["a ", "é", "日本語 ", "\0", "word "]),
        st.sampled_from([LIMIT - 1, LIMIT, LIMIT + 1, 3 * LIMIT, 1_600_000]),
    ),
)


def expected_text_error(texts: list[bytes]) -> str | None:
    """The error the tokenizer must give for the first bad text, or None if all are valid."""
    for i, text in enumerate(texts):
        if len(text) > LIMIT:
            return f"TEXT[{i}] is {len(text)} bytes, over the limit of {LIMIT} bytes"
        try:
            text.decode("utf-8")
        except UnicodeDecodeError as exc:
            return (
                f"TEXT[{i}] is not valid UTF-8 (byte 0x{text[exc.start]:02x} at offset {exc.start})"
            )
    return None


@fuzz_settings(max_examples=70)
@given(texts=st.lists(TEXT_ITEMS, min_size=1, max_size=6), protocol=st.sampled_from(PROTOCOLS))
def test_text_embedding_random_bytes(fuzzer: Fuzzer, texts: list[bytes], protocol: str) -> None:
    """Valid texts: unit-norm FP32 [b, 384], each row equal to the text embedded alone (over
    the other protocol); otherwise the first bad text's index and problem in the error."""
    target = "text_embedding/bytes"
    tally(target).examples += 1
    expected = expected_text_error(texts)
    try:
        got = fuzzer.embed(target, protocol, texts)
    except InferenceServerException as exc:
        message = assert_clear_error(exc, ("TEXT[",))
        assert expected is not None and expected in message, (expected, message)
        record(target, "error: too large" if "bytes, over" in expected else "error: not UTF-8")
    else:
        assert expected is None, f"served, but expected {expected!r}"
        assert got.shape == (len(texts), text_spec.HIDDEN_SIZE) and got.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
        other = "grpc" if protocol == "http" else "http"
        alone = np.concatenate([fuzzer.embed(target, other, [t]) for t in texts])
        np.testing.assert_allclose(got, alone, atol=TEXT_TOLERANCE, rtol=0)
        record(target, "served")
    fuzzer.assert_healthy(target)


# --- text_embedding: datatypes, shapes, batch sizes -------------------------------------------
DTYPES = [object, np.int32, np.int64, np.float32, np.float16, np.bool_, np.uint8, np.uint64]


def _array(dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    size = int(np.prod(shape)) if shape else 1
    if dtype is object:
        values = np.array([f"text {i}".encode() for i in range(size)], dtype=object)
    else:
        values = np.arange(size).astype(dtype)
    return values.reshape(shape)


TEXT_MUTATIONS = ["dtype", "shape", "batch", "lie", "extra", "missing"]


@st.composite
def text_requests(draw: st.DrawFn) -> tuple[list[Tensor], tuple[str, ...] | None]:
    """A valid TEXT request (BYTES [b, 1], 1 <= b <= 64) with none, one or two mutations: wrong
    datatype, wrong shape or rank, empty or oversized batch, a declared shape that lies, an
    extra input, TEXT missing. Returns the tensors and the names its error must mention (None:
    it is valid)."""
    mutations = draw(st.sets(st.sampled_from(TEXT_MUTATIONS), max_size=2))
    dtype: Any = object
    shape: tuple[int, ...] = (draw(st.integers(1, text_spec.MAX_BATCH_SIZE)), 1)
    if "dtype" in mutations:
        dtype = draw(st.sampled_from(DTYPES[1:]))
    if "shape" in mutations:
        rank = draw(st.sampled_from([0, 1, 2, 3]))
        dims = [st.integers(0, 70)] + [st.integers(0, 3)] * max(rank - 1, 0)
        shape = tuple(draw(st.tuples(*dims)))[:rank]
    if "batch" in mutations:
        shape = (draw(st.sampled_from([0, 65, 100, 1000])), 1)
    array = _array(dtype, shape)
    declared = None
    if "lie" in mutations:
        declared = draw(st.lists(st.integers(0, 70), min_size=1, max_size=3))
        declared = None if tuple(declared) == shape else declared
    tensors: list[Tensor] = [] if "missing" in mutations else [("TEXT", array, declared)]
    if "extra" in mutations:
        tensors.append(("EXTRA", np.zeros((1, 1), np.int32), None))
    valid = (
        [name for name, _, _ in tensors] == ["TEXT"]
        and dtype is object
        and declared is None
        and len(shape) == 2
        and shape[1] == 1
        and 1 <= shape[0] <= text_spec.MAX_BATCH_SIZE
    )
    return tensors, None if valid else ("TEXT", "EXTRA", "batch-size")


@fuzz_settings(max_examples=60)
@given(request=text_requests(), protocol=st.sampled_from(PROTOCOLS))
def test_text_embedding_wrong_types_and_shapes(
    fuzzer: Fuzzer, request: tuple[list[Tensor], tuple[str, ...] | None], protocol: str
) -> None:
    tensors, error_names = request
    target = "text_embedding/types_shapes"
    tally(target).examples += 1
    try:
        got = fuzzer.infer(target, protocol, text_spec.ENSEMBLE, tensors, ["EMBEDDING"])
    except InferenceServerException as exc:
        assert error_names is not None, f"valid request refused: {exc}"
        assert_clear_error(exc, error_names)
        record(target, "error")
    else:
        assert error_names is None, (
            f"served a bad request: {[(n, a.dtype, a.shape, d) for n, a, d in tensors]}"
        )
        batch = tensors[0][1].shape[0]
        assert got["EMBEDDING"].shape == (batch, text_spec.HIDDEN_SIZE)
        np.testing.assert_allclose(np.linalg.norm(got["EMBEDDING"], axis=1), 1.0, atol=1e-5)
        record(target, "served")
    fuzzer.assert_healthy(target)


# --- ctr_ranking: ids and TOP_K ---------------------------------------------------------------
IDS = st.one_of(
    st.integers(ctr_spec.MIN_ITEM_ID, ctr_spec.MAX_ITEM_ID),
    st.integers(int(INT64.min), int(INT64.max)),
    st.sampled_from([0, -1, 10_000, 2**40, int(INT64.min), int(INT64.max)]),
)
TOP_KS = st.one_of(
    st.none(),
    st.integers(1, 30),
    st.sampled_from([0, -1, 1, int(INT32.max), int(INT32.min)]),
    st.integers(int(INT32.min), int(INT32.max)),
)


@st.composite
def id_arrays(draw: st.DrawFn, max_small: int, large: list[int]) -> np.ndarray:
    """Mostly up to ``max_small`` drawn ids; one time in 12 an array of a size in ``large``
    (the bounds and beyond), filled from a drawn seed."""
    if draw(st.integers(0, 11)) == 0:
        size = draw(st.sampled_from(large))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        return rng.integers(-5, 10_010, size=size, dtype=np.int64)
    return np.array(draw(st.lists(IDS, max_size=max_small)), dtype=np.int64)


def vocab(ids: np.ndarray) -> np.ndarray:
    """The CTR id rule written out: ids outside 1..9999 are the out-of-vocabulary id 0."""
    ids = np.asarray(ids, dtype=np.int64)
    return np.where((ids >= 1) & (ids <= 9999), ids, 0)


def expected_ranking_errors(
    history: np.ndarray, candidates: np.ndarray, k: int | None
) -> list[str]:
    """Every bound the request breaks, as the message the server must give for it."""
    errors = []
    if not 1 <= len(candidates) <= ctr_spec.MAX_CANDIDATES:
        errors.append(f"CANDIDATES must hold 1 to 512 item ids, got {len(candidates)}")
    if len(history) > ctr_spec.MAX_HISTORY:
        errors.append(f"HISTORY must hold at most 4096 item ids, got {len(history)}")
    if k is not None and k <= 0:
        errors.append(f"TOP_K must be > 0, got {k}")
    return errors


def check_ranking(
    fuzzer: Fuzzer,
    target: str,
    protocol: str,
    history: np.ndarray,
    candidates: np.ndarray,
    k: int,
    ids: np.ndarray,
    scores: np.ndarray,
) -> None:
    """``(ids, scores)`` are the top ``k`` of ``candidates``: a sub-multiset of them, CTRs in
    [0, 1] descending, each id with its own score, and the scores those of the canonical request
    (last 63 history ids and the candidates mapped to the vocabulary, every candidate ranked)."""
    n = len(candidates)
    assert ids.shape == scores.shape == (min(k, n),), (ids.shape, scores.shape, k, n)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    assert not Counter(ids.tolist()) - Counter(candidates.tolist()), "ids not among candidates"
    assert np.all(np.isfinite(scores)) and np.all((scores >= 0) & (scores <= 1))
    assert np.all(np.diff(scores) <= 0), "scores not descending"
    canon_history = vocab(history)[-ctr_spec.HISTORY_LENGTH :]
    canon_ids, canon_scores = fuzzer.rank(target, protocol, canon_history, vocab(candidates), n)
    by_id = dict(zip(canon_ids.tolist(), canon_scores.tolist(), strict=True))
    per_candidate = np.array([by_id[int(c)] for c in vocab(candidates)], dtype=np.float32)
    np.testing.assert_allclose(
        scores, -np.sort(-per_candidate)[: min(k, n)], atol=CTR_TOLERANCE, rtol=0
    )
    np.testing.assert_allclose(
        [by_id[int(i)] for i in vocab(ids)], scores, atol=CTR_TOLERANCE, rtol=0
    )


@fuzz_settings(max_examples=90)
@given(
    history=id_arrays(80, [ctr_spec.MAX_HISTORY, ctr_spec.MAX_HISTORY + 1, 100_000]),
    candidates=id_arrays(24, [0, ctr_spec.MAX_CANDIDATES, ctr_spec.MAX_CANDIDATES + 1]),
    k=TOP_KS,
    protocol=st.sampled_from(PROTOCOLS),
)
def test_ctr_ranking_ids_and_top_k(
    fuzzer: Fuzzer, history: np.ndarray, candidates: np.ndarray, k: int | None, protocol: str
) -> None:
    target = "ctr_ranking/ids_top_k"
    tally(target).examples += 1
    errors = expected_ranking_errors(history, candidates, k)
    try:
        ids, scores = fuzzer.rank(target, protocol, history, candidates, k)
    except InferenceServerException as exc:
        message = assert_clear_error(exc, ("CANDIDATES", "HISTORY", "TOP_K"))
        assert any(e in message for e in errors), (errors, message)
        record(target, "error: " + message.split("ctr_preprocess: ")[-1].split(" must")[0])
    else:
        assert not errors, f"served, but expected one of {errors}"
        k_eff = ctr_spec.DEFAULT_TOP_K if k is None else k
        check_ranking(fuzzer, target, protocol, history, candidates, k_eff, ids, scores)
        record(target, "served")
    fuzzer.assert_healthy(target)


# --- ctr_ranking: datatypes and shapes --------------------------------------------------------
CTR_DTYPES = [np.int32, np.uint64, np.float32, np.float64, np.int8, np.bool_, object]


@st.composite
def ctr_tensor(draw: st.DrawFn, name: str, dtype: Any, rank: int) -> tuple[Tensor | None, bool]:
    """``name`` as the model wants it (dtype, rank) or mutated: wrong dtype (UINT64 includes
    2**64 - 1), wrong rank, a declared shape that lies, or missing. Returns (tensor or None,
    mutated)."""
    mutation = draw(st.sampled_from(["ok", "ok", "dtype", "rank", "lie", "missing"]))
    if mutation == "missing":
        return None, True
    if name == "TOP_K":  # a valid TOP_K is one value >= 1 (<= 0 is the ranking test's job)
        values = np.array([draw(st.integers(1, int(INT32.max)))], dtype=np.int64)
    else:
        size = draw(st.integers(1, 6))
        values = np.array(draw(st.lists(IDS, min_size=size, max_size=size)), dtype=np.int64)
    if mutation == "dtype":
        wrong = draw(st.sampled_from([d for d in CTR_DTYPES if d is not dtype]))
        if wrong is object:
            array = np.array([str(v).encode() for v in values], dtype=object)
        elif wrong is np.uint64:
            array = np.array([2**64 - 1, *range(len(values) - 1)], dtype=np.uint64)
        else:
            array = values.astype(wrong)
        return (name, array, None), True
    array = values.astype(dtype)
    if mutation == "rank":
        shape = draw(st.sampled_from([(), (1, len(array)), (len(array), 1, 1)]))
        return (name, array.reshape(shape) if shape else array[:1].reshape(()), None), True
    if mutation == "lie":
        declared = [len(array) + draw(st.sampled_from([-1, 1, 7]))]
        return (name, array, declared), True
    return (name, array, None), False


@st.composite
def ctr_requests(draw: st.DrawFn) -> tuple[list[Tensor], list[str]]:
    """A ctr_ranking request of HISTORY, CANDIDATES, TOP_K each maybe mutated; returns the
    tensors and the names of the mutated inputs (TOP_K missing is no mutation: optional)."""
    tensors: list[Tensor] = []
    mutated = []
    for name, dtype in (("HISTORY", np.int64), ("CANDIDATES", np.int64), ("TOP_K", np.int32)):
        tensor, changed = draw(ctr_tensor(name, dtype, 1))
        if tensor is not None:
            tensors.append(tensor)
        if changed and not (name == "TOP_K" and tensor is None):
            mutated.append(name)
    return tensors, mutated


@fuzz_settings(max_examples=60)
@given(request=ctr_requests(), protocol=st.sampled_from(PROTOCOLS))
def test_ctr_ranking_wrong_types_and_shapes(
    fuzzer: Fuzzer, request: tuple[list[Tensor], list[str]], protocol: str
) -> None:
    tensors, mutated = request
    target = "ctr_ranking/types_shapes"
    tally(target).examples += 1
    try:
        got = fuzzer.infer(
            target, protocol, ctr_spec.RANKING_ENSEMBLE, tensors, ["ITEM_IDS", "SCORES"]
        )
    except InferenceServerException as exc:
        assert mutated, f"valid request refused: {exc}"
        assert_clear_error(exc, tuple(mutated))
        record(target, "error")
    else:
        assert not mutated, f"served a request with bad {mutated}"
        inputs = {name: array for name, array, _ in tensors}
        k = int(inputs["TOP_K"][0]) if "TOP_K" in inputs else ctr_spec.DEFAULT_TOP_K
        if k <= 0:
            pytest.fail(f"TOP_K {k} was served")
        check_ranking(
            fuzzer, target, protocol, inputs["HISTORY"], inputs["CANDIDATES"], k,
            got["ITEM_IDS"], got["SCORES"],
        )  # fmt: skip
        record(target, "served")
    fuzzer.assert_healthy(target)


# Found by fuzzing: Triton 2.51 checks an ensemble's input count, not its required names; with
# the optional TOP_K present, a missing HISTORY or CANDIDATES passed the count and the ensemble
# answered "unexpected deadlock, at least one output is not set". Fixed in the configs.
@pytest.mark.parametrize("missing", ["HISTORY", "CANDIDATES"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_missing_required_input_next_to_top_k_is_named(
    fuzzer: Fuzzer, missing: str, protocol: str
) -> None:
    tensors: list[Tensor] = [
        (name, array, None)
        for name, array in (
            ("HISTORY", np.array([1, 2], np.int64)),
            ("CANDIDATES", np.array([3, 4], np.int64)),
            ("TOP_K", np.array([1], np.int32)),
        )
        if name != missing
    ]
    target = "ctr_ranking/types_shapes"
    with pytest.raises(InferenceServerException) as raised:
        fuzzer.infer(target, protocol, ctr_spec.RANKING_ENSEMBLE, tensors, ["ITEM_IDS"])
    try:
        assert_clear_error(raised.value, (missing,))
    finally:
        fuzzer.assert_healthy(target)


# --- raw HTTP/JSON bodies -----------------------------------------------------------------------
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
JSON_DATA = st.lists(st.one_of(JSON_SCALARS, st.lists(JSON_SCALARS, max_size=3)), max_size=6)


JSON_MUTATIONS = ["datatype", "shape", "data", "name", "drop", "bogus", "output", "inputs"]


@st.composite
def json_bodies(draw: st.DrawFn) -> tuple[str, Any]:
    """A valid KServe v2 JSON body for text_embedding or ctr_ranking with none, one or two
    mutations: a random datatype (bogus ones included), shape (negative dims included) or data
    (any JSON), an unknown or dropped input, an unknown output, or
    ``inputs`` that is no list."""
    model = draw(st.sampled_from([text_spec.ENSEMBLE, ctr_spec.RANKING_ENSEMBLE]))
    if model == text_spec.ENSEMBLE:
        texts = draw(st.lists(st.text(max_size=12), min_size=1, max_size=4))
        inputs = [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts), 1], "data": texts}]
    else:
        history = draw(st.lists(st.integers(int(INT64.min), int(INT64.max)), max_size=5))
        candidates = draw(st.lists(st.integers(1, 9999), min_size=1, max_size=5))
        inputs = [
            {"name": "HISTORY", "datatype": "INT64", "shape": [len(history)], "data": history},
            {"name": "CANDIDATES", "datatype": "INT64", "shape": [len(candidates)],
             "data": candidates},
        ]  # fmt: skip
    body: dict[str, Any] = {"inputs": inputs}
    for mutation in draw(st.sets(st.sampled_from(JSON_MUTATIONS), max_size=2)):
        target = draw(st.sampled_from(inputs)) if inputs else None
        if mutation == "datatype" and target:
            target["datatype"] = draw(st.sampled_from(["BYTES", "INT64", "INT32", "FP32", "FOO"]))
        elif mutation == "shape" and target:
            # Small dims only: Triton 2.51 allocates a JSON input's declared shape before
            # reading its data, and [2**32 + 1, 2] aborted the server (std::bad_alloc;
            # test_reliability.py::test_triton_2_51_aborts_on_a_huge_json_shape).
            target["shape"] = draw(st.lists(st.integers(-2, 8), max_size=3))
        elif mutation == "data" and target:
            target["data"] = draw(JSON_DATA)
        elif mutation == "name" and target:
            target["name"] = draw(st.sampled_from(["BOGUS", "", "text", "TOP_K"]))
        elif mutation == "drop" and target:
            inputs.remove(target)
        elif mutation == "bogus":
            inputs.append({"name": "BOGUS", "datatype": "INT32", "shape": [1], "data": [1]})
        elif mutation == "output":
            body["outputs"] = [{"name": draw(st.sampled_from(["EMBEDDING", "SCORES", "NOPE"]))}]
        elif mutation == "inputs":
            body["inputs"] = draw(JSON_SCALARS)
    return model, body


@fuzz_settings(max_examples=80)
@given(request=json_bodies())
def test_http_json_bodies(fuzzer: Fuzzer, request: tuple[str, Any]) -> None:
    """Any JSON body gets 200 with outputs or an error object that names a field or an input;
    Triton's JSON parser answers 500 for a field of the wrong JSON type, its checks 400."""
    model, body = request
    target = "http_json"
    tally(target).examples += 1
    tally(target).requests += 1
    conn = http.client.HTTPConnection(fuzzer.server.options.http_url, timeout=120)
    try:
        conn.request("POST", f"/v2/models/{model}/infer", body=json.dumps(body))
        response = conn.getresponse()
        status, payload = response.status, json.loads(response.read())
    finally:
        conn.close()
    if status == 200:
        assert payload["outputs"], payload
        record(target, "served")
    else:
        assert status in (400, 500), (status, payload)
        message = payload["error"]
        lowered = message.lower()
        assert not any(marker in lowered for marker in UNCLEAR), message
        fields = ("'inputs'", "'data'", "'shape'", "'name'", "'datatype'", "JSON", "datatype")
        sent = body["inputs"] if isinstance(body["inputs"], list) else []
        # a missing required input is named by the first step ("input 'HISTORY' is missing")
        required = ("'HISTORY'", "'CANDIDATES'")
        inputs = (*(f"'{i['name']}'" for i in sent), *required, "TEXT", "inputs", "output")
        assert any(name in message for name in fields + inputs), message
        if status == 500:
            assert "parse" in lowered, message  # only the JSON parser may answer 500
        record(target, f"error {status}")
    fuzzer.assert_healthy(target)


# --- ctr_session: a state machine of sequences -------------------------------------------------
@dataclass
class SessionModel:
    """What the server should hold: sequences Triton has open, and each one's history in the
    session store (a rejected event changes neither, except that END always closes)."""

    open: set = field(default_factory=set)
    histories: dict = field(default_factory=dict)


class SessionMachine(RuleBasedStateMachine):
    """Random events on a few correlation IDs (numeric and string, reused after END, never
    started, ended without START) with valid and invalid payloads; every answer is checked
    against ctr_ranking on the session's full history."""

    fuzzer: Fuzzer  # set by the test
    runs = 0

    def __init__(self) -> None:
        super().__init__()
        SessionMachine.runs += 1
        run = SessionMachine.runs
        # IDs of this run only, so that runs cannot see each other's sequences.
        self.cids: list[Hashable] = [
            9_000_000 + 10 * run,
            9_000_001 + 10 * run,
            f"fuzz-{run}-a",
            f"fuzz-{run}-é b",
        ]
        self.model = SessionModel()

    def send(
        self,
        protocol: str,
        cid: Hashable,
        item: np.ndarray,
        candidates: np.ndarray,
        start: bool,
        end: bool,
        declared: list[int] | None = None,
    ) -> dict[str, np.ndarray]:
        return self.fuzzer.infer(
            "ctr_session",
            protocol,
            ctr_spec.SESSION_MODEL,
            [("ITEM_ID", item, None), ("CANDIDATES", candidates, declared)],
            ["ITEM_IDS", "SCORES"],
            sequence_id=cid,
            sequence_start=start,
            sequence_end=end,
        )

    @rule(
        slot=st.integers(0, 3),
        protocol=st.sampled_from(PROTOCOLS),
        start=st.booleans(),
        end=st.booleans(),
        item=IDS,
        candidates=st.lists(IDS, min_size=1, max_size=8),
        payload=st.sampled_from(["ok", "ok", "ok", "no candidates", "513", "FP32 item", "lie"]),
    )
    def event(
        self,
        slot: int,
        protocol: str,
        start: bool,
        end: bool,
        item: int,
        candidates: list[int],
        payload: str,
    ) -> None:
        cid, model = self.cids[slot], self.model
        tally("ctr_session").examples += 1
        item_array = np.array([item], np.int64)
        cand = np.array(candidates, np.int64)
        declared = None
        if payload == "no candidates":
            cand = np.zeros(0, np.int64)
        elif payload == "513":
            cand = np.arange(1, 514, dtype=np.int64)
        elif payload == "FP32 item":
            item_array = item_array.astype(np.float32)
        elif payload == "lie":
            declared = [len(cand) + 1]
        try:
            got = self.send(protocol, cid, item_array, cand, start, end, declared)
        except InferenceServerException as exc:
            got, error = None, exc
        else:
            error = None

        # Triton's own checks come first and change nothing.
        if payload in ("FP32 item", "lie"):
            assert error is not None, "served a malformed request"
            assert_clear_error(error, ("ITEM_ID", "CANDIDATES"))
            return record("ctr_session", f"error: {payload}")
        if not start and cid not in model.open:
            assert error is not None, f"sequence {cid!r} served without START"
            assert_clear_error(error, ("START",))
            return record("ctr_session", "error: no START")
        if start:
            model.open.add(cid)
        if end:
            model.open.discard(cid)
        # Then the model's: a bad payload, or a sequence without state, changes no state.
        history = [item] if start else [*model.histories.get(cid, []), item]
        if payload != "ok" or (not start and cid not in model.histories):
            assert error is not None, f"served a request that should fail ({payload})"
            names = ("CANDIDATES must hold 1 to 512",) if payload != "ok" else ("has no state",)
            assert_clear_error(error, names)
            if end:
                model.histories.pop(cid, None)
            return record("ctr_session", "error: " + names[0])
        assert error is None, f"refused a valid event: {error}"
        if end:
            model.histories.pop(cid, None)
        else:
            model.histories[cid] = history
        self.check_against_ranking(protocol, history, cand, got)
        record("ctr_session", "served")

    def check_against_ranking(
        self, protocol: str, history: list[int], candidates: np.ndarray, got: dict
    ) -> None:
        ids, scores = self.fuzzer.rank(
            "ctr_session", protocol, np.array(history), candidates, len(candidates)
        )
        np.testing.assert_allclose(got["SCORES"], scores, atol=CTR_TOLERANCE, rtol=0)
        by_id = dict(zip(ids.tolist(), scores.tolist(), strict=True))
        np.testing.assert_allclose(
            [by_id[i] for i in got["ITEM_IDS"].tolist()], got["SCORES"], atol=CTR_TOLERANCE
        )
        assert sorted(got["ITEM_IDS"].tolist()) == sorted(candidates.tolist())

    @rule(
        protocol=st.sampled_from(PROTOCOLS),
        cid=st.sampled_from([0, "", -5, "x" * 129, 2**64 - 1]),
        start=st.booleans(),
    )
    def odd_correlation_id(self, protocol: str, cid: Hashable, start: bool) -> None:
        """IDs Triton refuses (0, empty, over 128 characters, negative over HTTP) get its
        error; the largest uint64 over HTTP is a sequence like any other."""
        tally("ctr_session").examples += 1
        if protocol == "grpc" and cid == 2**64 - 1:
            cid = int(INT64.max)  # the gRPC client refuses IDs over int64
        try:
            got = self.send(protocol, cid, np.array([7]), np.array([1, 2, 3]), start, True)
        except InferenceServerException as exc:
            if cid in (0, ""):
                assert_clear_error(exc, ("non-zero or non-empty correlation ID",))
            elif isinstance(cid, str):
                statuses = {"StatusCode.UNIMPLEMENTED", "501", *CLIENT_ERROR}
                assert_clear_error(exc, ("cannot be longer than 128",), statuses)
            elif cid == -5 and protocol == "http":
                assert_clear_error(exc, ("sequence_id",), JSON_PARSE_ERROR)
            else:
                assert not start, f"refused a started sequence {cid}: {exc}"
                assert_clear_error(exc, ("START",))
            return record("ctr_session", "error: correlation ID")
        assert cid not in (0, "") and not (isinstance(cid, str) and len(cid) > 128)
        assert start, f"served sequence {cid!r} without START"
        self.check_against_ranking(protocol, [7], np.array([1, 2, 3]), got)
        record("ctr_session", "served: odd correlation ID")

    @precondition(lambda self: bool(self.model.open))
    @rule(protocol=st.sampled_from(PROTOCOLS))
    def end_all(self, protocol: str) -> None:
        """END every open sequence with an event of its own, as a client would."""
        for cid in sorted(self.model.open, key=str):
            self.event(self.cids.index(cid), protocol, False, True, 42, [1, 2], "ok")

    def teardown(self) -> None:
        for cid in sorted(self.model.open, key=str):  # START + END: closes with or without state
            self.send("http", cid, np.array([1]), np.array([1]), True, True)
        # A fresh session behaves like ctr_ranking on its history, and the server is healthy.
        cid = f"fresh-{SessionMachine.runs}"
        history = [11, 10_500, 12]
        for i, item in enumerate(history):
            got = self.send("grpc", cid, np.array([item]), np.array([3, 4, 5]), i == 0, i == 2)
            self.check_against_ranking("http", history[: i + 1], np.array([3, 4, 5]), got)
        self.fuzzer.assert_healthy("ctr_session")


def test_ctr_session_sequences(fuzzer: Fuzzer) -> None:
    SessionMachine.fuzzer = fuzzer
    run_state_machine_as_test(
        SessionMachine, settings=fuzz_settings(max_examples=25, stateful_step_count=12)
    )


# --- the report ---------------------------------------------------------------------------------
MIN_EXAMPLES = {  # below these, hypothesis generated too little for the run to mean much
    "text_embedding/bytes": 40,
    "text_embedding/types_shapes": 40,
    "ctr_ranking/ids_top_k": 50,
    "ctr_ranking/types_shapes": 40,
    "http_json": 40,
    "ctr_session": 100,
}


def test_report_cases_tried(request: pytest.FixtureRequest) -> None:
    """Write build/fuzz/report.json (cases per target) and check each target that ran tried
    enough cases and met both outcomes where both are possible."""
    ran = {name: t for name, t in TALLIES.items() if name in MIN_EXAMPLES and t.examples}
    if not ran:
        pytest.skip("no fuzz target ran in this session")
    report = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "settings": {"derandomize": True, "deadline": None},
        "targets": {
            name: {
                "examples": t.examples,
                "requests": t.requests,
                "outcomes": dict(sorted(t.outcomes.items())),
            }
            for name, t in sorted(ran.items())
        },
    }
    REPORT_FILE.parent.mkdir(parents=True, exist_ok=True)
    REPORT_FILE.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["targets"], indent=2))
    for name, t in ran.items():
        assert t.examples >= MIN_EXAMPLES[name], (name, t.examples)
        served = sum(n for o, n in t.outcomes.items() if o.startswith("served"))
        assert served and served < sum(t.outcomes.values()), (name, t.outcomes)
