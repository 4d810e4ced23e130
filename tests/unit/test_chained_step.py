"""The one-step GPU model's logic (:class:`tritonrepo.pipelines.chained_step.ChainedStep`)
without a server: stages that misbehave for one request, or for a whole batch, give those
requests their own error naming the stage, and the other requests are served. The served path
(tokenize → encoder program → normalise on a real server) is
tests/server/test_one_step_gpu_model.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch

from tritonrepo.pipelines.chained_step import ChainedStep, Stage, read_stages
from tritonrepo.pipelines.function_calls import output_specs
from tritonrepo.step.errors import InvalidRequest
from tritonrepo.step.python_step import PythonStep

OUT = [{"name": "Y", "data_type": "TYPE_FP32", "dims": ["2"]}]


class Double(PythonStep):
    """X FP32 [b, 2] → H = 2 X; X[0, 0] == -1 is an invalid request, == -2 a bug."""

    output_dtypes: ClassVar[dict[str, np.dtype]] = {"H": np.dtype(np.float32)}

    def prepare(self, inputs):
        if inputs["X"][0, 0] == -1:
            raise InvalidRequest("X[0, 0] is -1")
        if inputs["X"][0, 0] == -2:
            raise SystemExit(3)
        return inputs["X"]

    def run(self, items):
        return [{"H": 2 * x} for x in items]


class Last(PythonStep):
    """H → Y, misbehaving on purpose for rows whose H[0, 0] is 20 (a list), 22 (no Y), 24 (wrong
    shape) or 26 (a float64 torch tensor, which is cast)."""

    output_dtypes: ClassVar[dict[str, np.dtype]] = {"Y": np.dtype(np.float32)}

    def prepare(self, inputs):
        return inputs["H"]

    def run(self, items):
        out = []
        for h in items:
            key = float(h[0, 0])
            if key == 20:
                out.append([1.0, 2.0])
            elif key == 22:
                out.append({"Z": h})
            elif key == 24:
                out.append({"Y": np.zeros((1, 5), np.float32)})
            elif key == 26:
                out.append({"Y": torch.from_numpy(h.astype(np.float64))})
            else:
                out.append({"Y": h + 1})
        return out


class Short(Last):
    def run(self, items):
        return super().run(items)[:-1]


def chain(last: PythonStep) -> ChainedStep:
    step = ChainedStep()
    step.model_config = {"max_batch_size": 8, "output": OUT}
    step.model_name = "pipe"
    step.output_names = ["Y"]
    step.output_specs = output_specs(OUT, 8)
    step.stages = [
        Stage("pipe_pre", Double(), [{"name": "X"}]),
        Stage("pipe_post", last, [{"name": "H"}]),
    ]
    return step


def request(first: float) -> dict[str, np.ndarray]:
    return {"X": np.array([[first, 1.0]], np.float32)}


def test_each_request_gets_its_own_answer_or_its_own_error():
    results = chain(Last()).run([request(v) for v in (1, -1, -2, 10, 11, 12, 13, 5)])
    np.testing.assert_allclose(results[0]["Y"], [[3.0, 3.0]])
    assert isinstance(results[1], InvalidRequest) and str(results[1]) == "pipe_pre: X[0, 0] is -1"
    assert isinstance(results[2], RuntimeError) and "pipe_pre: SystemExit" in str(results[2])
    assert "pipe_post: TypeError: a result is a list" in str(results[3])
    assert "pipe_post returned missing output(s) 'Y'" in str(results[4])
    assert "pipe_post: output 'Y' has shape [1, 5], expected [1, 2]" in str(results[5])
    assert results[6]["Y"].dtype == np.float32 and results[6]["Y"].tolist() == [[26.0, 2.0]]
    np.testing.assert_allclose(results[7]["Y"], [[11.0, 3.0]])


def test_a_stage_that_returns_too_few_results_fails_its_batch_only_with_its_name():
    results = chain(Short()).run([request(1), request(2)])
    assert all("pipe_post: RuntimeError: run returned 1 results for 2" in str(r) for r in results)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is not JSON"),
        ('{"model": "m"}', "must be a JSON list of stage objects"),
        ('[{"model": "m", "class": "a:B"}]', "stage 0 has no version, kind, config"),
    ],
)
def test_a_broken_stages_file_is_named_with_the_fix(tmp_path: Path, text: str, message: str):
    path = tmp_path / "stages.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as caught:
        read_stages(path)
    assert str(path) in str(caught.value) and "tritonrepo-new" in str(caught.value)
    with pytest.raises(FileNotFoundError, match="tritonrepo-new"):
        read_stages(tmp_path / "missing.json")
