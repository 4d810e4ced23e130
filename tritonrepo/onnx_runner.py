"""Run an ONNX model with ONNX Runtime for a Triton dynamic batch of requests.

Used by the Python-based backend ``backends/onnxruntime_python`` (the embedded server has no
ONNX Runtime backend). Requests are concatenated along the batch axis and run as one
``InferenceSession.run``; requests whose non-batch shapes differ (possible only when a config sets
``allow_ragged_batch``) run as separate groups, so no padding is ever invented here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from tritonrepo.errors import InvalidRequest


class OnnxRunner:
    """An ONNX Runtime CPU session that serves batches of requests.

    Args:
        model_file: the ``.onnx`` file.
        intra_op_threads: ONNX Runtime intra-op threads (0 = ONNX Runtime's default, all cores).
        output_names: outputs to return, in order (default: all of the model's outputs).
    """

    def __init__(
        self,
        model_file: str | Path,
        intra_op_threads: int = 0,
        output_names: Sequence[str] | None = None,
    ) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(model_file), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = list(output_names or [o.name for o in self.session.get_outputs()])

    def run_batch(
        self, requests: Sequence[dict[str, np.ndarray]]
    ) -> list[dict[str, np.ndarray] | Exception]:
        """Run all requests, batched along axis 0 where their shapes allow.

        Args:
            requests: per request, ``{input name: array [batch_i, ...]}``.

        Returns:
            Per request, ``{output name: array [batch_i, ...]}``, or the exception that its
            group raised (InvalidRequest for a missing input).
        """
        results: list[dict[str, np.ndarray] | Exception | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = {}
        for i, inputs in enumerate(requests):
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                results[i] = InvalidRequest(f"missing inputs {missing}")
                continue
            signature = tuple(
                (n, inputs[n].shape[1:], inputs[n].dtype.str) for n in self.input_names
            )
            groups.setdefault(signature, []).append(i)
        for members in groups.values():
            feed = {
                n: np.concatenate([requests[i][n] for i in members], axis=0)
                for n in self.input_names
            }
            try:
                outputs = self.session.run(self.output_names, feed)
            except Exception as exc:
                for i in members:
                    results[i] = exc
                continue
            start = 0
            for i in members:
                stop = start + len(requests[i][self.input_names[0]])
                results[i] = {
                    n: out[start:stop] for n, out in zip(self.output_names, outputs, strict=True)
                }
                start = stop
        return results  # type: ignore[return-value]
