"""Record a pipeline's drift reference profile (``make artifacts``, after its models are built).

For a description with a ``[drift]`` table (:mod:`tritonrepo.description.drift`), the reference
requests (its ``reference`` function, else the ``[samples]``) go through the same features
function the serving step runs (:mod:`tritonrepo.step.drift`), and each feature's values make a
:class:`~tritonrepo.step.feature_profile.FeatureProfile`. The profile is written to
``model_repository/<pipeline>/drift_profile.json`` only when it changed (the reference data and
the functions are deterministic, so an unchanged build rewrites nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tritonrepo.description import Pipeline, import_ref
from tritonrepo.paths import REPO_ROOT
from tritonrepo.step.drift import DEFAULT_FEATURES, FeatureContext
from tritonrepo.step.feature_profile import PROFILE_FILE, Profile, feature_profile
from tritonrepo.step.function_refs import load_function


class DriftProfileError(RuntimeError):
    """The reference or the features function failed, or a feature has no usable value."""


def reference_requests(pipeline: Pipeline) -> tuple[str, list[Mapping[str, np.ndarray]]]:
    """``(what the reference is, its requests)``: the ``[drift] reference`` function's list, or
    the samples (one request for a batched pipeline; one per row for ``max_batch_size = 0``)."""
    spec = pipeline.drift
    assert spec is not None
    if spec.reference is not None:
        return spec.reference, list(import_ref(spec.reference)())
    samples: Mapping[str, np.ndarray] = import_ref(pipeline.samples or "")()
    if pipeline.max_batch_size > 0:
        return pipeline.samples or "", [samples]
    rows = len(next(iter(samples.values())))
    return pipeline.samples or "", [{k: v[i] for k, v in samples.items()} for i in range(rows)]


def feature_values(
    pipeline: Pipeline, requests: Iterable[Mapping[str, np.ndarray]], repository: Path
) -> dict[str, np.ndarray]:
    """Every feature's values over ``requests``, as the serving step computes them."""
    spec = pipeline.drift
    assert spec is not None
    function = load_function(spec.features or DEFAULT_FEATURES, code_root=REPO_ROOT)
    context = FeatureContext(repository.resolve(), batched=pipeline.max_batch_size > 0)
    values: dict[str, list[np.ndarray]] = {}
    for inputs in requests:
        for name, value in function(inputs, context).items():
            values.setdefault(name, []).append(np.asarray(value, dtype=np.float64).ravel())
    return {name: np.concatenate(parts) for name, parts in values.items()}


def profile(pipeline: Pipeline, repository: Path) -> Profile:
    """The pipeline's profile over its reference.

    Raises:
        DriftProfileError: no feature, or a feature without a finite reference value.
    """
    spec = pipeline.drift
    assert spec is not None
    source, requests = reference_requests(pipeline)
    values = feature_values(pipeline, requests, repository)
    if not values:
        raise DriftProfileError(f"{pipeline.name}: the features function returned no feature")
    features = {}
    for name, v in sorted(values.items()):
        try:
            features[name] = feature_profile(v, spec.bins)
        except ValueError as exc:
            raise DriftProfileError(f"{pipeline.name}: feature {name!r}: {exc}") from exc
    return Profile(pipeline.name, source, features)


def write(pipeline: Pipeline, repository: Path) -> dict[str, Any] | None:
    """Write the profile when the description has ``[drift]``; a summary of what was written
    (``{"path", "features", "changed"}``), or None without ``[drift]``.

    Raises:
        DriftProfileError: as :func:`profile`; or the pipeline's model folder is not in
            ``repository`` (described but not generated yet: nothing is written).
    """
    if getattr(pipeline, "drift", None) is None:
        return None
    path = repository / pipeline.name / PROFILE_FILE
    if not path.parent.is_dir():
        raise DriftProfileError(
            f"no {path.parent} to write the drift profile into: run `make pipeline "
            f"NAME={pipeline.name}` first"
        )
    text = profile(pipeline, repository).to_json()
    changed = not path.is_file() or path.read_text() != text
    if changed:
        path.write_text(text)
    return {"path": path, "features": text.count('"edges"'), "changed": changed}
