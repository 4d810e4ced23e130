"""The Python-backend models of the CTR pipeline (``ctr_preprocess``, ``ctr_postprocess``,
``ctr_session``); their ``model.py`` files are one-line subclasses of these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonrepo.ctr import spec
from tritonrepo.ctr.features import (
    check_candidates,
    check_history,
    check_top_k,
    history_window,
    model_rows,
)
from tritonrepo.ctr.ranking import top_k
from tritonrepo.ctr.sessions import SessionStore
from tritonrepo.step.errors import InvalidRequest
from tritonrepo.step.metrics import stub_labels
from tritonrepo.step.parameters import REQUIRED, Parameter
from tritonrepo.step.python_step import Outputs, PythonStep
from tritonrepo.step.sessions import read_controls


class PreprocessStep(PythonStep):
    """``ctr_preprocess``: ``HISTORY`` INT64 ``[h]`` (0 ≤ h ≤ 4096), ``CANDIDATES`` INT64 ``[n]``
    (1 ≤ n ≤ 512), optional ``TOP_K`` INT32 ``[1]`` → ``input_ids`` INT64 ``[n, 64]``,
    ``CANDIDATE_IDS`` INT64 ``[n]`` (as sent), ``K`` INT32 ``[1]`` (TOP_K or the default 10).

    Raises (per request, as its error): InvalidRequest for no or too many candidates, a history
    over ``spec.MAX_HISTORY`` ids, or TOP_K ≤ 0.
    """

    def prepare(self, inputs: dict[str, np.ndarray]) -> Outputs:
        for name in ("HISTORY", "CANDIDATES"):  # optional in the config: see its comment
            if name not in inputs:
                raise InvalidRequest(f"input '{name}' is missing")
        candidates = check_candidates(inputs["CANDIDATES"])
        history = check_history(inputs["HISTORY"])
        k = check_top_k(inputs.get("TOP_K"))
        return {
            spec.CORE_INPUT: model_rows(history_window(history), candidates),
            "CANDIDATE_IDS": candidates,
            "K": np.array([k], dtype=np.int32),
        }

    def run(self, items: list[Outputs]) -> list[Outputs | Exception]:
        return list(items)


class PostprocessStep(PythonStep):
    """``ctr_postprocess``: ``ctr`` FP32 ``[n, 1]``, ``CANDIDATE_IDS`` INT64 ``[n]``, ``K`` INT32
    ``[1]`` → ``ITEM_IDS`` INT64 ``[min(K, n)]`` and ``SCORES`` FP32 ``[min(K, n)]``, by CTR
    descending (ties keep the request's order)."""

    def prepare(self, inputs: dict[str, np.ndarray]) -> Outputs:
        try:
            ids, scores = top_k(
                inputs["CANDIDATE_IDS"], inputs[spec.CORE_OUTPUT], int(inputs["K"].reshape(-1)[0])
            )
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from exc
        return {"ITEM_IDS": ids, "SCORES": scores}

    def run(self, items: list[Outputs]) -> list[Outputs | Exception]:
        return list(items)


@dataclass
class _SessionEvent:
    key: Any
    window: np.ndarray
    candidates: np.ndarray
    end: bool


class CtrSessionStep(PythonStep):
    """``ctr_session`` on CPU: one event per request → the candidates ranked given the session.

    Inputs: ``ITEM_ID`` INT64 ``[1]`` (the item the user just interacted with), ``CANDIDATES``
    INT64 ``[n]`` (1 ≤ n ≤ 512), plus the sequence batcher's START/END controls and the request's
    correlation ID. Outputs: ``ITEM_IDS`` INT64 ``[n]`` and ``SCORES`` FP32 ``[n]``, every candidate
    ranked by CTR descending — the same numbers ``ctr_ranking`` gives for the full history
    (``TOP_K = n``), because the rows are built by the same code and scored by the same
    ``ctr_model`` (a BLS call, so sessions share ctr_model's dynamic batcher with ctr_ranking).

    State (:class:`SessionStore`) is keyed by ``request.correlation_id()`` (int or str). A failed
    request changes no state; END drops it even when the request fails. Config parameters:
    :attr:`PARAMETERS`; the idle timeout is ``sequence_batching.max_sequence_idle_microseconds``
    plus ``IDLE_GRACE_S``, so Triton always drops an idle sequence before this store does.
    """

    IDLE_GRACE_S = 1.0
    # Gauge of the sessions this instance holds (labels model, version, instance), on Triton's
    # metrics endpoint; set after every execution, so START, END and evictions all show.
    SESSIONS_METRIC = "tritonrepo_sessions_active"
    PARAMETERS = (
        Parameter(
            "max_sessions",
            "int",
            REQUIRED,
            "sessions",
            "sessions kept per instance; the least recently used is evicted beyond it",
            minimum=1,
        ),
        Parameter("core_model", "str", spec.CORE_MODEL, "model", "the model BLS calls score with"),
    )

    def initialize(self, args: dict[str, str]) -> None:
        self.instance_name = args.get("model_instance_name", "")
        self.version = args.get("model_version", "")
        super().initialize(args)

    def setup(self) -> None:
        idle_us = int(self.model_config["sequence_batching"]["max_sequence_idle_microseconds"])
        self.sessions = SessionStore(
            idle_timeout_s=idle_us / 1e6 + self.IDLE_GRACE_S,
            max_sessions=self.settings["max_sessions"],
        )
        self.core_model = self.settings["core_model"]
        # The family must outlive its metric: keep both.
        self.sessions_family = self.pb_utils.MetricFamily(
            name=self.SESSIONS_METRIC,
            description="ctr_session sessions held in memory (started, not ended or evicted)",
            kind=self.pb_utils.MetricFamily.GAUGE,
        )
        self.sessions_gauge = self.sessions_family.Metric(
            labels=stub_labels(self.model_name, self.version, self.instance_name)
        )
        self.sessions_gauge.set(0)

    def finalize(self) -> None:
        """Deletes the sessions gauge from Triton's metrics endpoint (the gauge, then its
        family: :mod:`tritonrepo.step.metrics` says why here), then the error counters."""
        self.sessions_gauge = None
        self.sessions_family = None
        super().finalize()

    def execute(self, requests: list[Any]) -> list[Any]:
        """:meth:`PythonStep.execute`, then the sessions gauge set to the store's size (a
        session an execution started, ended or evicted counts at once)."""
        try:
            return super().execute(requests)
        finally:
            self.sessions_gauge.set(len(self.sessions))

    def read_inputs(self, request: Any) -> dict[str, Any]:
        inputs: dict[str, Any] = super().read_inputs(request)
        controls = read_controls(self.pb_utils, request)
        inputs["START"], inputs["END"] = controls.start, controls.end
        inputs["correlation_id"] = controls.key
        return inputs

    def prepare(self, inputs: dict[str, Any]) -> _SessionEvent:
        key, end = inputs["correlation_id"], inputs["END"]
        try:
            item = np.asarray(inputs["ITEM_ID"]).reshape(-1)
            if len(item) != 1:
                raise InvalidRequest(f"ITEM_ID must hold exactly one item id, got {len(item)}")
            candidates = check_candidates(inputs["CANDIDATES"])
            window = self.sessions.next_window(key, int(item[0]), start=inputs["START"])
        except InvalidRequest:
            if end:
                self.sessions.end(key)
            raise
        return _SessionEvent(key, window, candidates, end)

    def run(self, items: list[_SessionEvent]) -> list[Outputs | Exception]:
        self.sessions.evict_idle()
        rows = [model_rows(event.window, event.candidates) for event in items]
        scores = self._score(np.concatenate(rows))
        results: list[Outputs | Exception] = []
        start = 0
        for event, event_rows in zip(items, rows, strict=True):
            stop = start + len(event_rows)
            if isinstance(scores, Exception):
                results.append(scores)
            else:
                ids, ranked = top_k(event.candidates, scores[start:stop], len(event.candidates))
                results.append({"ITEM_IDS": ids, "SCORES": ranked})
                self.sessions.commit(event.key, event.window)
            if event.end:
                self.sessions.end(event.key)
            start = stop
        return results

    def _score(self, rows: np.ndarray) -> np.ndarray | Exception:
        """CTR of each row by BLS calls to ``ctr_model`` of at most its max_batch_size rows."""
        pb = self.pb_utils
        out = []
        for begin in range(0, len(rows), spec.CORE_MAX_BATCH_SIZE):
            request = pb.InferenceRequest(
                model_name=self.core_model,
                requested_output_names=[spec.CORE_OUTPUT],
                inputs=[pb.Tensor(spec.CORE_INPUT, rows[begin : begin + spec.CORE_MAX_BATCH_SIZE])],
            )
            response = request.exec()
            if response.has_error():
                return RuntimeError(f"{self.core_model}: {response.error().message()}")
            out.append(self.host_array(pb.get_output_tensor_by_name(response, spec.CORE_OUTPUT)))
        return np.concatenate(out).reshape(-1)
