"""The vocabulary of the hostile-request catalogue (``tests/hostile_cases.py``): a
:class:`Case`, its :class:`Outcome`, the well-formed requests of each ensemble that the cases
mutate, and checks of a served answer."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tests import hostile_transport as t
from tests.hostile_transport import Reply

SERVED, REFUSED, DIES = "served", "refused", "dies"
STUB_DIES = "stub dies"  # the server lives, a Python step's stub process dies
HTTP_CLIENT_ERROR = frozenset({"400"})
# Triton 2.51's HTTP JSON reader answers 500 for a field of the wrong JSON type (malformed JSON
# is the client's fault, but the frontend does not say so): still a per-request error.
HTTP_JSON_ERROR = frozenset({"400", "500"})
GRPC_INVALID = frozenset({"StatusCode.INVALID_ARGUMENT"})


def probe_png(width: int = 32, height: int = 32) -> bytes:
    """A valid 8-bit RGB PNG (``width`` x ``height`` pixels) of a horizontal gradient, made
    with the standard library."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + b"".join(bytes((x * 8 % 256, 128, 255 - x * 8 % 256)) for x in range(width))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


@dataclass(frozen=True)
class Outcome:
    """What a case does to the server.

    Attributes:
        kind: :data:`SERVED` (answered with a result, server alive), :data:`REFUSED` (an error
            of its own with one of ``statuses`` and a message matching ``message``, a regular
            expression, server alive), :data:`DIES` (the tritonserver process ends by
            ``signal``), :data:`STUB_DIES` (a Python step's stub process dies: the error
            matches ``message``, the process lives, the model fails afterwards).
        statuses: the statuses a refusal may carry (:class:`Reply.status`).
        message: regular expression (``re.search``, case-insensitive) the refusal's text matches.
        signal: the signal that ends the process (``signal.SIGSEGV`` ...).
        note: what else is true of it (e.g. "400 MB held in memory").
    """

    kind: str
    statuses: frozenset[str] = frozenset()
    message: str = ""
    signal: int | None = None
    note: str = ""

    def describe(self) -> str:
        """One line for the report: "refused: 400 (message)", "process dies (SIGFPE)" ..."""
        if self.kind == DIES:
            return f"process dies ({signal.Signals(self.signal).name})"
        if self.kind == STUB_DIES:
            return "a Python step's stub dies, its model fails until reloaded"
        if self.kind == REFUSED:
            statuses = "/".join(sorted(s.replace("StatusCode.", "") for s in self.statuses))
            return f"refused: {statuses}, server alive"
        return "served, server alive" + (f" ({self.note})" if self.note else "")


def served(note: str = "") -> Outcome:
    return Outcome(SERVED, note=note)


def refused(statuses: frozenset[str], message: str) -> Outcome:
    return Outcome(REFUSED, statuses, message)


def dies(sig: signal.Signals) -> Outcome:
    return Outcome(DIES, signal=int(sig))


def stub_dies(statuses: frozenset[str]) -> Outcome:
    """The request reaches a Python step whose stub process dies on it: the answer is an
    INTERNAL "Stub process ... is not healthy", the server lives, the model fails after it."""
    return Outcome(STUB_DIES, statuses, r"stub process .* is not healthy")


GUARD_REFUSES = refused(frozenset({"400", "411", "413", "414", "415", "431"}), r".")


@dataclass(frozen=True)
class Case:
    """One hostile request.

    Attributes:
        name: unique, ``snake_case``.
        protocol: ``"http"`` (well-formed HTTP, ``http.client``), ``"raw"`` (raw socket to the
            HTTP port) or ``"grpc"``.
        models: the smallest model set it needs (the server is started with these).
        source: the public source: Triton PR, QA test or bulletin.
        fixed_in: first Triton release with the fix ("" = none known, or nothing to fix).
        send: ``send(host, port) -> Reply``.
        direct: its outcome on the embedded 2.51 server.
        guarded: its outcome behind the HTTP guard; None for gRPC.
        protects: what refuses it on 2.51 direct (or "nothing").
        check: for served cases, ``check(reply) -> problem`` ("" = the answer is right).
    """

    name: str
    protocol: str
    models: tuple[str, ...]
    source: str
    fixed_in: str
    send: Callable[[str, int], Reply]
    direct: Outcome
    guarded: Outcome | None
    protects: str
    check: Callable[[Reply], str] | None = field(default=None, compare=False)


# --- requests that work: the base every case mutates -----------------------------------------
TEXT = "text_embedding"
RANKING = "ctr_ranking"
SESSION = "ctr_session"
IMAGE = "image_classification"
POSTPROCESS = "image_postprocess"
SESSION_MODELS = ("ctr_model", SESSION)  # ctr_session scores through BLS calls to ctr_model


def infer_path(model: str) -> str:
    return f"/v2/models/{model}/infer"


def text_inputs(shape: list[int] | None = None, data: object = None) -> list[dict]:
    return [
        {
            "name": "TEXT",
            "datatype": "BYTES",
            "shape": shape or [1, 1],
            "data": ["a hostile request"] if data is None else data,
        }
    ]


def ranking_inputs(history_shape: list[int] | None = None, history: object = None) -> list[dict]:
    return [
        {
            "name": "HISTORY",
            "datatype": "INT64",
            "shape": history_shape or [3],
            "data": [1, 2, 3] if history is None else history,
        },
        {"name": "CANDIDATES", "datatype": "INT64", "shape": [3], "data": [4, 5, 6]},
        {"name": "TOP_K", "datatype": "INT32", "shape": [1], "data": [2]},
    ]


def session_inputs(item_shape: list[int] | None = None, item: object = None) -> list[dict]:
    return [
        {
            "name": "ITEM_ID",
            "datatype": "INT64",
            "shape": item_shape or [1],
            "data": [7] if item is None else item,
        },
        {"name": "CANDIDATES", "datatype": "INT64", "shape": [3], "data": [4, 5, 6]},
    ]


SESSION_PARAMS = {"sequence_id": 4242, "sequence_start": True, "sequence_end": True}


def post(
    model: str, body: bytes, headers: dict[str, str] | None = None
) -> Callable[[str, int], Reply]:
    """A sender of ``body`` as a JSON POST to ``model``'s infer endpoint."""
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    return lambda host, port: t.http_request(host, port, infer_path(model), body, hdrs)


def post_json(model: str, inputs: list[dict], outputs: list[dict] | None = None, **params):
    return post(model, t.json_body(inputs, outputs, **params))


def image_binary(
    outputs: list[dict], top_k: int = 3, image: bytes | None = None, size: int | None = None
) -> tuple[bytes, int]:
    """An image_classification request in the binary extension: IMAGE BYTES [1, 1] (a PNG)
    and TOP_K INT32 [1, 1]; ``size`` overrides IMAGE's ``binary_data_size`` (a lie)."""
    element = t.bytes_element(image if image is not None else probe_png())
    header = {
        "inputs": [
            {
                "name": "IMAGE",
                "datatype": "BYTES",
                "shape": [1, 1],
                "parameters": {"binary_data_size": len(element) if size is None else size},
            },
            {"name": "TOP_K", "datatype": "INT32", "shape": [1, 1], "data": [top_k]},
        ],
        "outputs": outputs,
    }
    return t.binary_body(header, [element])


def post_binary(model: str, body_and_length: tuple[bytes, int], header_length: object = None):
    body, length = body_and_length
    value = str(length if header_length is None else header_length)
    return post(model, body, {"Inference-Header-Content-Length": value})


def postprocess_binary(outputs: list[dict]) -> tuple[bytes, int]:
    """An image_postprocess request (the step, called directly): logits FP32 [1, 1000] and
    K INT32 [1, 1], binary."""
    logits = np.linspace(-3, 3, 1000, dtype=np.float32).reshape(1, 1000)
    header = {
        "inputs": [
            {
                "name": "logits",
                "datatype": "FP32",
                "shape": [1, 1000],
                "parameters": {"binary_data_size": logits.nbytes},
            },
            {"name": "K", "datatype": "INT32", "shape": [1, 1], "data": [3]},
        ],
        "outputs": outputs,
    }
    return t.binary_body(header, [logits.tobytes()])


def grpc_text(
    outputs: list[tuple[str, int]], shape: list[int] | None = None, **kw
) -> Callable[[str, int], Reply]:
    data = np.array([[b"a hostile request"]], dtype=object)
    return lambda host, port: t.grpc_infer(
        host, port, TEXT, [("TEXT", data, shape)], outputs or [("EMBEDDING", 0)], **kw
    )


def grpc_ranking(outputs: list[tuple[str, int]], history_shape: list[int] | None = None, **kw):
    tensors = [
        ("HISTORY", np.array([1, 2, 3], dtype=np.int64), history_shape),
        ("CANDIDATES", np.array([4, 5, 6], dtype=np.int64), None),
        ("TOP_K", np.array([2], dtype=np.int32), None),
    ]
    return lambda host, port: t.grpc_infer(host, port, RANKING, tensors, outputs, **kw)


def grpc_session(outputs: list[tuple[str, int]], **kw):
    tensors = [
        ("ITEM_ID", np.array([7], dtype=np.int64), None),
        ("CANDIDATES", np.array([4, 5, 6], dtype=np.int64), None),
    ]
    kw = {"sequence_id": 4243, "sequence_start": True, "sequence_end": True, **kw}
    return lambda host, port: t.grpc_infer(host, port, SESSION, tensors, outputs, **kw)


def grpc_image(outputs: list[tuple[str, int]], **kw):
    tensors = [
        ("IMAGE", np.array([[probe_png()]], dtype=object), None),
        ("TOP_K", np.array([[3]], dtype=np.int32), None),
    ]
    return lambda host, port: t.grpc_infer(host, port, IMAGE, tensors, outputs, **kw)


# --- checks of served answers -----------------------------------------------------------------
def http_classes(reply: Reply, output: str, count: int) -> str:
    """ "" when the HTTP answer carries ``output`` as ``count`` classification strings
    ``"<value>:<index>[:<label>]"`` per batch row."""
    outs = {o.get("name"): o for o in (reply.body or {}).get("outputs", [])}
    if output not in outs:
        return f"no {output} in {reply.text[:200]}"
    out = outs[output]
    if out.get("datatype") != "BYTES" or out.get("shape", [None])[-1] != count:
        return f"{output} is not {count} classes: {json.dumps(out)[:200]}"
    if not all(str(s).count(":") >= 1 for s in np.array(out.get("data", [])).reshape(-1)):
        return f"{output} holds no '<value>:<index>' strings: {out.get('data')}"
    return ""


def grpc_classes(reply: Reply, output: str, count: int) -> str:
    value = (reply.body or {}).get(output)
    if value is None or value.shape[-1] != count:
        return f"{output} is not {count} classes: {value!r}"
    if not all(b":" in bytes(s) for s in value.reshape(-1)):
        return f"{output} holds no '<value>:<index>' strings: {value!r}"
    return ""


def http_has(*names: str) -> Callable[[Reply], str]:
    def check(reply: Reply) -> str:
        got = [o.get("name") for o in (reply.body or {}).get("outputs", [])]
        missing = [n for n in names if n not in got]
        return f"outputs {got} lack {missing}" if missing else ""

    return check


def grpc_has(*names: str) -> Callable[[Reply], str]:
    def check(reply: Reply) -> str:
        missing = [n for n in names if (reply.body or {}).get(n) is None]
        return f"outputs lack {missing}" if missing else ""

    return check


def shm_read_beyond_file(model: str, body_inputs: Callable[[dict], list[dict]]):
    """A sender that registers a 4 KB system shared-memory region of its own as 1 GiB
    (``byte_size`` beyond the file) and then asks ``model`` to read an input at offset 512 MiB
    of it; the region and its file are removed afterwards. ``body_inputs(params)`` gives the
    JSON inputs, ``params`` being the shared-memory parameters of the first input."""

    def send(host: str, port: int) -> Reply:
        import os
        import secrets

        name = f"hostile_{secrets.token_hex(4)}"
        path = f"/dev/shm/{name}"
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, 4096)
            register = json.dumps({"key": f"/{name}", "offset": 0, "byte_size": 1 << 30})
            reply = t.http_request(
                host, port, f"/v2/systemsharedmemory/region/{name}/register", register.encode()
            )
            if not reply.ok:
                return reply
            params = {
                "shared_memory_region": name,
                "shared_memory_byte_size": 24,
                "shared_memory_offset": 1 << 29,
            }
            reply = t.http_request(host, port, infer_path(model), t.json_body(body_inputs(params)))
            t.http_request(host, port, f"/v2/systemsharedmemory/region/{name}/unregister")
            return reply
        finally:
            os.close(fd)
            os.unlink(path)

    return send
