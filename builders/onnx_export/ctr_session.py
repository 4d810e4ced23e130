"""Build the ONNX graph of ``ctr_session`` on GPU: the CTR network with the history as state.

``model_repository/ctr_session/config.pbtxt`` (the GPU config) promises a TensorRT plan that
keeps each session's history as Triton implicit state. This module writes the ONNX graph that
plan is built from (``builders.tensorrt.plans`` turns it into ``1/model.plan``):

=================  ===========  ======  ===================================================
tensor             dtype        shape   meaning
=================  ===========  ======  ===================================================
``ITEM_ID``        INT64        [1]     the item the user just interacted with (raw id)
``CANDIDATES``     INT64        [n]     raw candidate ids, n = 1..512 (``spec.MAX_CANDIDATES``)
``HISTORY_IN``     INT64        [63]    state: the window so far (Triton feeds zeros at START)
``START``          INT32        [1]     control CONTROL_SEQUENCE_START (1 on the first event)
``END``            INT32        [1]     control CONTROL_SEQUENCE_END (not read by the graph)
``READY``          INT32        [1]     control CONTROL_SEQUENCE_READY (1 when the slot runs)
``HISTORY_OUT``    INT64        [63]    state out: the window with ``ITEM_ID`` appended
``ITEM_IDS``       INT64        [n]     all candidates (as sent), by CTR descending
``SCORES``         FP32         [n]     their CTR in (0, 1)
=================  ===========  ======  ===================================================

Arithmetic, the rules of ``tritonrepo.ctr.features`` and ``tritonrepo.ctr.sessions`` written as
ONNX operators:

* ids outside ``1..9999`` become 0 (``spec.OOV_ID``, the padding id), for the new item and the
  candidates alike;
* ``HISTORY_OUT = concat(HISTORY_IN[1:], item)``: shift left by one, newest last. On START the
  graph starts from zeros itself (Triton also resets the state to ``initial_state`` then; doing
  it here too keeps the plan right under a config that forgets ``initial_state``). When READY is
  0 (a batch slot without a request) the state passes through unchanged;
* one row ``[HISTORY_OUT, candidate]`` per candidate (``features.model_rows``) goes through the
  ctr_model network, read from ``ctr_model/1/model.onnx`` so the session scores with exactly the
  weights ``ctr_ranking`` serves;
* ``TopK`` with ``k = n`` sorts all candidates by CTR, descending (ONNX breaks ties by the lower
  index, i.e. the request's order, as ``ctr_postprocess`` does; TensorRT does not promise an
  order among exact ties), and ``Gather`` returns the ids as sent.

END is an input only because Triton binds every configured control to an engine input
(tensorrt_backend ``InitializeSequenceControlInputBindings`` fails with "input 'END' not
found"); TensorRT keeps unused network inputs, and the plan builder checks the engine's I/O
against the config after building. There is one state tensor, so Triton's pairing of state
inputs and outputs by sorted name is trivially consistent (``plan_config.check_config`` checks
it for any number).

The CPU config (``configs/cpu.pbtxt``, Python backend) is not affected by this ``model.onnx``
in the same version folder: the Python backend loads ``model.py`` only.

Usage: ``python -m builders.onnx_export.ctr_session [--repository DIR] [--network PATH]`` (``make
artifacts`` runs it after building ``ctr_model``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tritonrepo.ctr import spec
from tritonrepo.paths import MODEL_REPOSITORY

ITEM_ID, CANDIDATES = "ITEM_ID", "CANDIDATES"
HISTORY_IN, HISTORY_OUT = "HISTORY_IN", "HISTORY_OUT"
START, END, READY = "START", "END", "READY"
ITEM_IDS, SCORES = "ITEM_IDS", "SCORES"
CONTROLS = (START, END, READY)  # INT32 [1], int32_false_true [0, 1] in config.pbtxt
INPUTS = (ITEM_ID, CANDIDATES, HISTORY_IN, *CONTROLS)
OUTPUTS = (ITEM_IDS, SCORES, HISTORY_OUT)
CANDIDATE_DIM = "candidates"  # the symbolic length n of CANDIDATES, ITEM_IDS and SCORES
_PREFIX = "session/"  # names of the tensors and nodes this module adds
# Where builders.tensorrt.plans gets this module's plan feeds (builders.pipeline.plan_feeds).
PLAN_FEEDS = "builders.tensorrt.spec_feeds:text_or_ctr"


def session_graph(network):
    """Wrap the ctr_model network into the ``ctr_session`` graph (see the module docstring).

    Args:
        network: ``onnx.ModelProto`` of ctr_model: input ``input_ids`` INT64 ``[batch, 64]``,
            output ``ctr`` FP32 ``[batch, 1]`` (``ctr_model/<v>/model.onnx``; the FP32 export
            or the INT8 QDQ variant).

    Returns:
        A new ``onnx.ModelProto``; ``network`` is not modified.

    Raises:
        ValueError: ``network`` does not have exactly that input and output, or already uses a
            tensor name this module adds.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = network.graph
    if [i.name for i in graph.input] != [spec.CORE_INPUT] or [o.name for o in graph.output] != [
        spec.CORE_OUTPUT
    ]:
        raise ValueError(
            f"expected the ctr_model network ({spec.CORE_INPUT} -> {spec.CORE_OUTPUT}), got "
            f"inputs {[i.name for i in graph.input]}, outputs {[o.name for o in graph.output]}"
        )
    taken = {t for node in graph.node for t in (*node.input, *node.output)}
    taken |= {i.name for i in graph.initializer}
    clash = sorted(t for t in taken if t.startswith(_PREFIX) or t in (*INPUTS, *OUTPUTS))
    if clash:
        raise ValueError(f"the network already uses the names {clash}")

    def name(n: str) -> str:
        return _PREFIX + n

    def const(n: str, value) -> str:
        constants.append(numpy_helper.from_array(np.asarray(value), name(n)))
        return name(n)

    def node(op: str, inputs: list[str], output: str, **attrs) -> str:
        out = output if output in OUTPUTS or output == spec.CORE_INPUT else name(output)
        nodes.append(helper.make_node(op, inputs, [out], name=name(op + "/" + output), **attrs))
        return out

    constants: list = []
    nodes: list = []
    lo = const("min_item_id", np.array([spec.MIN_ITEM_ID], np.int64))
    hi = const("max_item_id", np.array([spec.MAX_ITEM_ID], np.int64))
    oov = const("oov_id", np.array([spec.OOV_ID], np.int64))
    empty = const("empty_history", np.full(spec.HISTORY_LENGTH, spec.PAD_ID, np.int64))

    def to_vocabulary(ids: str, tag: str) -> str:
        known = node(
            "And",
            [node("GreaterOrEqual", [ids, lo], f"{tag}_ge_min"),
             node("LessOrEqual", [ids, hi], f"{tag}_le_max")],
            f"{tag}_known",
        )  # fmt: skip
        return node("Where", [known, ids, oov], f"{tag}_in_vocabulary")

    # State: HISTORY_OUT = READY ? concat((START ? empty : HISTORY_IN)[1:], item) : HISTORY_IN
    start = node("Cast", [START], "start", to=TensorProto.BOOL)
    ready = node("Cast", [READY], "ready", to=TensorProto.BOOL)
    base = node("Where", [start, empty, HISTORY_IN], "base_history")
    kept = node(
        "Slice",
        [base, const("one", np.array([1], np.int64)),
         const("history_length", np.array([spec.HISTORY_LENGTH], np.int64)),
         const("axis0", np.array([0], np.int64))],
        "kept_history",
    )  # fmt: skip
    shifted = node("Concat", [kept, to_vocabulary(ITEM_ID, "item")], "shifted_history", axis=0)
    history = node("Where", [ready, shifted, HISTORY_IN], HISTORY_OUT)

    # Rows [HISTORY_OUT, candidate], one per candidate: INT64 [n, 64] = the network's input_ids.
    count = node("Shape", [CANDIDATES], "candidate_count")  # INT64 [1] = [n]
    window_shape = node(
        "Concat",
        [count, const("history_length_dim", np.array([spec.HISTORY_LENGTH], np.int64))],
        "window_shape",
        axis=0,
    )
    windows = node(
        "Expand",
        [node("Unsqueeze", [history, const("axes0", np.array([0], np.int64))], "history_row"),
         window_shape],
        "history_rows",
    )  # fmt: skip
    candidate_column = node(
        "Unsqueeze",
        [to_vocabulary(CANDIDATES, "candidates"), const("axes1", np.array([1], np.int64))],
        "candidate_column",
    )
    node("Concat", [windows, candidate_column], spec.CORE_INPUT, axis=1)

    # Network output ctr [n, 1] -> scores [n] -> all n candidates by score, descending.
    scores = node("Reshape", [spec.CORE_OUTPUT, const("flat", np.array([-1], np.int64))], "scores")
    order = name("order")
    nodes.append(
        helper.make_node(
            "TopK", [scores, count], [SCORES, order], name=name("TopK/ranking"),
            axis=0, largest=1, sorted=1,
        )
    )  # fmt: skip
    node("Gather", [CANDIDATES, order], ITEM_IDS, axis=0)

    int64, fp32, int32 = TensorProto.INT64, TensorProto.FLOAT, TensorProto.INT32
    inputs = [
        helper.make_tensor_value_info(ITEM_ID, int64, [1]),
        helper.make_tensor_value_info(CANDIDATES, int64, [CANDIDATE_DIM]),
        helper.make_tensor_value_info(HISTORY_IN, int64, [spec.HISTORY_LENGTH]),
        *(helper.make_tensor_value_info(c, int32, [1]) for c in CONTROLS),
    ]
    outputs = [
        helper.make_tensor_value_info(ITEM_IDS, int64, [CANDIDATE_DIM]),
        helper.make_tensor_value_info(SCORES, fp32, [CANDIDATE_DIM]),
        helper.make_tensor_value_info(HISTORY_OUT, int64, [spec.HISTORY_LENGTH]),
    ]
    # Prefix nodes first, then the network, then the ranking: a topological order.
    split = nodes.index(next(n for n in nodes if n.output[0] == spec.CORE_INPUT)) + 1
    combined = helper.make_graph(
        [*nodes[:split], *graph.node, *nodes[split:]],
        spec.SESSION_MODEL,
        inputs,
        outputs,
        initializer=[*graph.initializer, *constants],
        value_info=list(graph.value_info),
    )
    model = helper.make_model(
        combined,
        opset_imports=list(network.opset_import),
        ir_version=network.ir_version,
        producer_name="builders.onnx_export.ctr_session",
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def build(network_path: Path, out_path: Path) -> Path:
    """Write the ``ctr_session`` graph around the network in ``network_path`` to ``out_path``.

    The file is written to a temporary name in the same folder and renamed, so an interrupted
    build leaves no half-written ``model.onnx``.

    Args:
        network_path: a ctr_model ONNX file (``ctr_model/1/model.onnx``, built by
            ``builders.onnx_export.ctr``).
        out_path: where to write, e.g. ``ctr_session/1/model.onnx``.

    Returns:
        ``out_path``.

    Raises:
        FileNotFoundError: ``network_path`` is missing (run ``make artifacts``).
        ValueError: see :func:`session_graph`.
    """
    import onnx

    if not network_path.is_file():
        raise FileNotFoundError(f"{network_path} is missing; build it with `make artifacts`")
    model = session_graph(onnx.load(str(network_path)))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.stem}.tmp-{os.getpid()}.onnx")
    try:
        onnx.save(model, str(tmp))
        tmp.replace(out_path)
    finally:
        tmp.unlink(missing_ok=True)
    return out_path


def main(argv: list[str] | None = None) -> int:
    """Command line; exit 1 with a one-line reason when the network is missing or unusable."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument(
        "--network", type=Path, help="ctr_model ONNX file (default: <repository>/ctr_model/1)"
    )
    args = parser.parse_args(argv)
    network = args.network or args.repository / spec.CORE_MODEL / "1" / "model.onnx"
    out = args.repository / spec.SESSION_MODEL / "1" / "model.onnx"
    try:
        build(network, out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
