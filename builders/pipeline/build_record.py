"""What the build of a described core records and checks, whatever its kind (one core:
:mod:`builders.pipeline.build`; several: :mod:`builders.pipeline.build_graph`): the digest of the
description's sources (:func:`source_digest`), the description's path as a record names it
(:func:`description_path`), who built it (:data:`BUILT_BY`, :data:`LIBRARIES`) and the batch
parity check of a built graph (:func:`parity`, :class:`ParityError`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tritonrepo.description import Header
from tritonrepo.paths import REPO_ROOT

PARITY_ATOL = 1e-4  # max |batch N - batch 1| per output element (FP32 ONNX Runtime, CPU)
BUILT_BY = "builders.pipeline.build"
LIBRARIES = ("onnx", "onnxruntime", "numpy", "torch", "skl2onnx")


class ParityError(RuntimeError):
    """Batch-N and batch-1 outputs of the built model differ; the message has the figures."""


def source_digest(pipeline: Header) -> str:
    """SHA-256 over the description and every ``.py`` file in its folder (sorted by name): a
    change to either rebuilds the model."""
    digest = hashlib.sha256()
    for path in [pipeline.source, *sorted(pipeline.folder.glob("*.py"))]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def description_path(pipeline: Header) -> str:
    """The description's path as a build record names it: relative to the checkout when inside
    it, else absolute."""
    source = pipeline.source
    return (
        source.relative_to(REPO_ROOT).as_posix()
        if source.is_relative_to(REPO_ROOT)
        else str(source)
    )


def parity(model_path: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, float]:
    """``{output: max |batch N - row by row|}`` of the ONNX model at ``model_path`` over
    ``feeds`` (batch-first; rows = the feeds' batch): integer outputs count the differing
    elements.

    Raises:
        ParityError: an output differs by more than :data:`PARITY_ATOL`.
    """
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    joint = session.run(names, dict(feeds))
    rows = len(next(iter(feeds.values())))
    single = [session.run(names, {k: v[i : i + 1] for k, v in feeds.items()}) for i in range(rows)]
    figures = {}
    for j, name in enumerate(names):
        alone = np.concatenate([np.asarray(s[j]) for s in single])
        together = np.asarray(joint[j])
        if together.dtype.kind in "fc":
            figures[name] = float(np.max(np.abs(together - alone))) if together.size else 0.0
        else:
            figures[name] = float(np.count_nonzero(together != alone))
        if figures[name] > PARITY_ATOL:
            raise ParityError(
                f"output '{name}' differs by {figures[name]:.3g} between batch {rows} and "
                f"batch 1 (limit {PARITY_ATOL}): rows of the graph depend on each other"
            )
    return figures


def write_checked(
    folder: Path,
    model: bytes,
    feeds: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]],
) -> dict[str, float]:
    """Write the ONNX ``model`` as ``folder/model.onnx`` once it passes :func:`parity` on
    ``feeds`` (one feed, or every feed a graph's core got on the samples; staged as
    ``model.onnx.tmp`` first, so a failure leaves no ``model.onnx``); the parity figures (the
    largest per output over the feeds).

    Raises:
        ParityError: the batch parity check failed (the staged file is removed).
    """
    folder.mkdir(parents=True, exist_ok=True)
    staged = folder / "model.onnx.tmp"
    staged.write_bytes(model)
    figures: dict[str, float] = {}
    try:
        for one in [feeds] if isinstance(feeds, Mapping) else feeds:
            for name, value in parity(staged, one).items():
                figures[name] = max(value, figures.get(name, 0.0))
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    staged.replace(folder / "model.onnx")
    return figures
