"""The generic session model of a stateful described pipeline (``[sequence]``): a Python model
with ``sequence_batching`` that keeps each session's state, runs the user's
``step(state, inputs) -> (state, outputs)`` on each event, calls the core model through BLS and
answers with the ``[postprocess]`` function (:mod:`tritonrepo.pipelines.session_calls`).

A generated ``model_repository/<pipeline>/1/model.py`` is a one-line subclass of
:class:`SessionStep`; its ``config.pbtxt`` names the functions and the core model, and, for a
core that returns state (``[[sequence.state]]``), the state tensors (``core_states``) and who
keeps them: this model, feeding each session's state to the core and taking the next one from
the core's outputs (``configs/cpu.pbtxt``), or the core itself with Triton's implicit state
(``implicit_state``, a TensorRT plan in ``config.pbtxt``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tritonrepo.pipelines.function_calls import output_specs
from tritonrepo.pipelines.session_calls import (
    CoreStateSpec,
    Event,
    SequenceFlags,
    SessionEvents,
    Tensors,
)
from tritonrepo.step.function_refs import load_function
from tritonrepo.step.parameters import REQUIRED, Parameter
from tritonrepo.step.python_step import Outputs, PythonStep
from tritonrepo.step.sessions import SessionStore, read_controls


class SessionStep(PythonStep):
    """Inputs: the config's inputs, each ``[1, *dims]`` (one event per request), plus the
    sequence batcher's START/END controls and the request's correlation ID. Outputs: the
    config's outputs, ``[1, *dims]``.

    State (:class:`~tritonrepo.step.sessions.SessionStore`, one per instance: Triton routes a
    sequence to one instance) is created at START, dropped at END, evicted after
    ``sequence_batching.max_sequence_idle_microseconds`` plus :attr:`IDLE_GRACE_S` without a
    request (Triton has dropped the sequence by then and gives no callback), and bounded by
    ``max_sessions``: a new session beyond it is refused with a per-request error.

    A core that returns state (parameter ``core_states``): the store keeps each session's state
    tensors beside the step's state, zeros at START; every core call gets them joined with the
    step's outputs, and the core's state outputs of that call become the session's state once
    the event is answered. With ``implicit_state`` the core keeps them (Triton's implicit
    state): each event is its own core call, sent with the session's correlation ID and
    START/END flags.

    Per request (as its error; the others are served): InvalidRequest for a request without
    state and without START, a refused new session, a batch over 1, or a ``ValueError``
    from the step or postprocess function; an internal error when a
    function raises anything else, returns outputs that do not fit, or the core model fails.

    Raises:
        FunctionImportError: from ``initialize``: a function cannot be loaded.
        ParameterError: from ``initialize``: a parameter does not fit :attr:`PARAMETERS`.
    """

    IDLE_GRACE_S = 1.0
    PARAMETERS = (
        Parameter("step", "str", None, "module:function", "step(state, inputs); none: as sent"),
        Parameter("postprocess", "str", REQUIRED, "module:function", "the response's function"),
        Parameter("code_root", "str", "../..", "directory", "put on sys.path before importing"),
        Parameter("core_model", "str", REQUIRED, "model", "the model BLS calls go to"),
        Parameter("core_inputs", "names", REQUIRED, "tensors", "step outputs sent to the core"),
        Parameter("core_outputs", "names", REQUIRED, "tensors", "core outputs for postprocess"),
        Parameter("core_max_batch_size", "int", REQUIRED, "rows", "rows per BLS call", minimum=1),
        Parameter(
            "step_outputs",
            "str",
            REQUIRED,
            "JSON",
            "the step's outputs: [{name, data_type, dims}] (core inputs and extras)",
        ),
        Parameter("max_sessions", "int", REQUIRED, "sessions", "per instance", minimum=1),
        Parameter("controls", "names", ("START", "END"), "tensors", "START and END control inputs"),
        Parameter(
            "core_states",
            "str",
            None,
            "JSON",
            "state the core returns: [{input, output, data_type, dims}]",
        ),
        Parameter("implicit_state", "flag", False, "", "the core keeps core_states (Triton)"),
    )

    def setup(self) -> None:
        s = self.settings
        root = self.version_dir.parent / Path(s["code_root"])
        idle_us = int(self.model_config["sequence_batching"]["max_sequence_idle_microseconds"])
        self.store = SessionStore(idle_us / 1e6 + self.IDLE_GRACE_S, s["max_sessions"],
                                  when_full="refuse")  # fmt: skip
        self.controls = s["controls"]
        self.core_model, self.core_outputs = s["core_model"], s["core_outputs"]
        max_batch = int(self.model_config.get("max_batch_size", 1))
        states = tuple(
            CoreStateSpec(t["input"], t["output"], spec.dtype, spec.dims)
            for t in json.loads(s["core_states"] or "[]")
            for spec in output_specs([{**t, "name": t["output"]}]).values()
        )
        step = load_function(s["step"], root) if s["step"] else None
        self.events = SessionEvents(
            step, s["step"] or "",
            load_function(s["postprocess"], root), s["postprocess"],
            self.store, output_specs(json.loads(s["step_outputs"])), s["core_inputs"],
            output_specs(self.model_config["output"], max_batch), self._call_core,
            s["core_max_batch_size"], states, s["implicit_state"],
        )  # fmt: skip

    def read_inputs(self, request: Any) -> dict[str, Any]:
        inputs = super().read_inputs(request)
        controls = read_controls(self.pb_utils, request, *self.controls[:2])
        return {"event": Event(controls.key, controls.start, controls.end, inputs)}

    def prepare(self, inputs: dict[str, Any]) -> Event:
        return inputs["event"]

    def run(self, items: list[Event]) -> list[Outputs | Exception]:
        return self.events.run(items)

    def _call_core(
        self, feeds: Tensors, sequence: SequenceFlags | None = None
    ) -> Tensors | Exception:
        """The core model on ``feeds`` through BLS; its error as a RuntimeError. With
        ``sequence`` (implicit state), the request carries the session's correlation ID and
        its START/END flags."""
        pb = self.pb_utils
        extra: dict[str, Any] = {}
        if sequence is not None:
            key, start, end = sequence
            flags = (pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START if start else 0) | (
                pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END if end else 0
            )
            extra = {"correlation_id": key, "flags": flags}
        request = pb.InferenceRequest(
            model_name=self.core_model,
            requested_output_names=list(self.core_outputs),
            inputs=[pb.Tensor(name, np.ascontiguousarray(v)) for name, v in feeds.items()],
            **extra,
        )
        response = request.exec()
        if response.has_error():
            return RuntimeError(f"{self.core_model}: {response.error().message()}")
        return {
            name: self.host_array(pb.get_output_tensor_by_name(response, name))
            for name in self.core_outputs
        }
