"""The command line's generic inference, ``infer``: any served model, its inputs given by name
(the parser is added to :mod:`tritonrepo_client.cli.app`'s by :func:`add_infer_parser`).

Examples::

    tritonrepo-client infer text_embedding --input TEXT='[["A man is eating food."]]'
    tritonrepo-client infer my_model --input FEATURES=@rows.npy --input SCALE='[[0.5]]' \\
        --output-dir out/      # out/<output>.npy per output
    tritonrepo-client infer nudenet_detector --input IMAGE=@photo.jpg
    tritonrepo-client infer digit_stream --sequence-id 7 --start --input PIXELS=@row0.npy

An input's VALUE is a JSON literal (nested lists; strings for BYTES inputs, or
``{"base64": "..."}`` for binary items: the form this command prints them in) or ``@FILE``: a
``.npy`` file (no pickled objects: texts as a unicode array), a ``.json`` file, or any other
file, whose bytes are one BYTES item (a batch of one, ``[[bytes]]``: an image, a document).
Values are checked against the model's metadata before anything is sent
(:mod:`tritonrepo_client.pipeline_requests`).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tritonrepo_client.cli.control import tls_from_args
from tritonrepo_client.pipeline import PipelineClient
from tritonrepo_client.validation import parse_correlation_id

VALUE_HELP = (
    'a JSON literal (e.g. TEXT=\'[["hello"]]\'; binary items as {"base64": "..."}), '
    "@file.npy, @file.json, or @FILE of any other kind: its bytes as one BYTES item"
)


def input_argument(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` of ``--input`` → ``(NAME, VALUE)``, the value not read yet.

    Raises:
        argparse.ArgumentTypeError: no ``=``, or an empty name or value (a usage error).
    """
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name or not value.strip():
        raise argparse.ArgumentTypeError(
            f"expected NAME=VALUE with VALUE {VALUE_HELP}, got {text!r}"
        )
    return name, value


def load_value(name: str, value: str) -> Any:
    """The array-like of ``--input NAME=VALUE``: a JSON literal, or ``@FILE`` read as ``.npy``
    (``numpy.load`` without pickles), ``.json``, or else as raw bytes (``[[bytes]]``). In JSON,
    an item ``{"base64": "..."}`` is those bytes.

    Raises:
        ValueError: not JSON, a JSON number beyond float64 (``1e400``: it would become inf), a
            ``base64`` item that is not base64, or a ``.npy`` of Python objects (pickled; numpy
            refuses to load those without trusting the file).
        OSError: the file cannot be read.
    """
    if not value.startswith("@"):
        try:
            return _binary_items(name, json.loads(value, parse_float=_float_parser(name)))
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"--input {name}: the value is not JSON ({exc.msg} at character {exc.pos}): "
                f"pass {VALUE_HELP}; quote it for the shell, e.g. {name}='[[\"hello\"]]'"
            ) from None
    path = Path(value[1:])
    suffix = path.suffix.lower()
    if suffix == ".npy":
        try:
            return np.load(path, allow_pickle=False)
        except ValueError as exc:
            if "pickle" not in str(exc).lower():
                raise ValueError(f"--input {name}: {path} is not a .npy array: {exc}") from None
            raise ValueError(
                f"--input {name}: {path} holds Python objects (pickled), which are not loaded: "
                "save texts as a unicode array, np.save(path, np.array(texts, dtype=str))"
            ) from None
    if suffix == ".json":
        text = path.read_text(encoding="utf-8")
        try:
            return _binary_items(name, json.loads(text, parse_float=_float_parser(name)))
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"--input {name}: {path} is not JSON ({exc.msg}, line {exc.lineno} column "
                f"{exc.colno})"
            ) from None
    return [[path.read_bytes()]]  # one BYTES item: an image, a document


def _float_parser(name: str) -> Callable[[str], float]:
    """``json.loads``' ``parse_float`` for ``--input name``: a JSON number as a Python float,
    refusing a finite literal beyond the largest float64 (``1e400``), which ``float()`` would
    turn into inf. ``Infinity`` and ``NaN`` are JSON constants, not numbers: they pass.

    Raises:
        ValueError: such a literal (the message names the input and the literal).
    """

    def parse(text: str) -> float:
        number = float(text)
        if math.isinf(number):
            raise ValueError(
                f"--input {name}: {text} is beyond the largest float ({sys.float_info.max:.4g}) "
                "and would become inf; pass Infinity if an infinity is meant"
            )
        return number

    return parse


def _binary_items(name: str, value: Any) -> Any:
    """``value`` with every ``{"base64": "..."}`` item (at any depth) decoded to bytes.

    Raises:
        ValueError: a ``base64`` item whose text is not base64.
    """
    if isinstance(value, list):
        return [_binary_items(name, v) for v in value]
    if isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except (ValueError, binascii.Error) as exc:
            raise ValueError(f"--input {name}: a base64 item is not base64: {exc}") from None
    return value


def load_inputs(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """``{name: array-like}`` of the ``--input`` pairs.

    Raises:
        ValueError: a name given twice, or a value that cannot be read (:func:`load_value`).
        OSError: a file cannot be read.
    """
    inputs: dict[str, Any] = {}
    for name, value in pairs:
        if name in inputs:
            raise ValueError(f"--input {name} is given twice: give each input once")
        inputs[name] = load_value(name, value)
    return inputs


def _text_of(item: Any) -> Any:
    """A BYTES item for JSON: its UTF-8 text, else ``{"base64": ...}`` of its bytes."""
    if isinstance(item, bytes | bytearray):
        try:
            return bytes(item).decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(bytes(item)).decode("ascii")}
    return item


def jsonable(array: np.ndarray) -> Any:
    """``array`` as nested lists for JSON: numbers as numbers, BYTES items as UTF-8 text
    where they decode, else ``{"base64": "..."}``.

    FP32 and FP16 numbers are written with the digits of their own type, the shortest text
    that reads back as the same value (``206.11667``, as numpy prints it, not the
    ``206.11666870117188`` of the same number widened to a float64): no digits the model did
    not compute, nothing lost for a reader that parses them back into that type.
    """
    if array.dtype.kind == "f" and array.dtype.itemsize < 8:
        shortest = [float(str(value)) for value in array.ravel()]
        return np.array(shortest, dtype=np.float64).reshape(array.shape).tolist()
    if array.dtype.kind not in "OS":
        return array.tolist()

    def walk(value: Any) -> Any:
        return [walk(v) for v in value] if isinstance(value, list) else _text_of(value)

    return walk(array.tolist())


def format_outputs(answers: Mapping[str, np.ndarray]) -> str:
    """One JSON object ``{output name: nested list}`` (:func:`jsonable`)."""
    return json.dumps({name: jsonable(a) for name, a in answers.items()}, ensure_ascii=False)


def npy_array(array: np.ndarray) -> np.ndarray:
    """``array`` as saved without pickles: a BYTES (object) array as a unicode array when every
    item is UTF-8, else as fixed-width bytes (``S``; numpy drops trailing NUL bytes)."""
    if array.dtype.kind != "O":
        return array
    items = [bytes(i) if isinstance(i, bytes | bytearray) else str(i).encode() for i in array.flat]
    try:
        texts = [i.decode("utf-8") for i in items]
    except UnicodeDecodeError:
        return np.array(items, dtype=bytes).reshape(array.shape)
    return np.array(texts, dtype=str).reshape(array.shape)


def write_outputs(answers: Mapping[str, np.ndarray], directory: Path) -> list[Path]:
    """Write each answer as ``directory/<name>.npy`` (:func:`npy_array`; the directory is
    made) and return the paths.

    Raises:
        ValueError: an output name that is not a plain file name (``/``, ``\\``, leading dot).
        OSError: the directory or a file cannot be written.
    """
    for name in answers:
        if "/" in name or "\\" in name or name.startswith(".") or not name:
            raise ValueError(f"output {name!r} is not a plain file name: use the JSON output")
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, array in answers.items():
        path = directory / f"{name}.npy"
        np.save(path, npy_array(array), allow_pickle=False)
        paths.append(path)
    return paths


def add_infer_parser(sub: Any) -> None:
    """Add ``infer`` to the command line's subparsers."""
    infer = sub.add_parser(
        "infer",
        help="one inference on any served model, inputs by name; prints the outputs as one "
        "JSON object (or writes .npy files)",
    )
    infer.add_argument("model", metavar="NAME", help="the model (or ensemble) to run")
    infer.add_argument(
        "--input",
        dest="inputs",
        metavar="NAME=VALUE",
        type=input_argument,
        action="append",
        required=True,
        help=f"an input tensor (repeatable); VALUE is {VALUE_HELP}; with max_batch_size > 0 "
        "the first dim is the batch",
    )
    infer.add_argument(
        "--output",
        dest="outputs",
        action="append",
        help="output to return (repeatable; default: all of them)",
    )
    infer.add_argument("--model-version", default="", help="version to run (default: policy)")
    infer.add_argument(
        "--sequence-id",
        metavar="ID",
        help="for a stateful pipeline: the event's stream (digits: a numeric ID, else a string "
        "ID of up to 128 bytes); with --start for its first event and --end for its last",
    )
    infer.add_argument("--start", action="store_true", help="this event starts the stream")
    infer.add_argument("--end", action="store_true", help="this event ends the stream")
    infer.add_argument(
        "--output-dir",
        type=Path,
        help="write each output as DIR/<output>.npy instead of printing JSON (BYTES outputs "
        "as unicode arrays)",
    )


def infer_command(args: argparse.Namespace) -> int:
    """``infer``: read the inputs, check them against the model, run it, print or write the
    outputs; exit 0. Errors (bad inputs, nothing sent; server errors) raise ValueError,
    OSError or ClientError, which :func:`tritonrepo_client.cli.app.main` prints as one line."""
    inputs = load_inputs(args.inputs)
    sequence_id = None
    if args.sequence_id is not None:
        sequence_id = parse_correlation_id(args.sequence_id, "--sequence-id", args.protocol)
    elif args.start or args.end:
        raise ValueError("--start and --end need --sequence-id: the stream the event belongs to")
    with PipelineClient(
        args.model,
        args.url,
        args.protocol,
        args.timeout,
        tls_from_args(args),
        priority=args.priority or 0,
        timeout_us=args.timeout_us,
    ) as client:
        answers = client.infer(inputs, args.outputs, args.model_version or None,
                               sequence_id=sequence_id, sequence_start=args.start,
                               sequence_end=args.end)  # fmt: skip
    if args.output_dir is None:
        print(format_outputs(answers))
        return 0
    for path, (name, array) in zip(
        write_outputs(answers, args.output_dir), answers.items(), strict=True
    ):
        print(f"{name}: {array.dtype} {list(array.shape)} -> {path}")
    return 0


__all__ = [
    "add_infer_parser",
    "format_outputs",
    "infer_command",
    "input_argument",
    "jsonable",
    "load_inputs",
    "load_value",
    "npy_array",
    "write_outputs",
]
