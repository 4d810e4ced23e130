"""The ctr_ranking section of ``make bench-gpu`` (``benchmarks/gpu/ctr.py``).

CPU tests: the answer checks, the request bodies, the in-process reference against
``builders.onnx_export.ctr_network.predict`` (the reference implementation) and the summary's
verdicts on made-up figures. The GPU test runs the quick section on a CUDA GPU (``make test-gpu``
host).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from benchmarks.gpu import ctr as gpu_ctr
from benchmarks.gpu import ctr_checks as gpu_ctr_checks
from benchmarks.gpu import ctr_in_process as gpu_ctr_in_process
from benchmarks.gpu import ctr_summary as gpu_ctr_summary
from benchmarks.harness.loadgen import Measurement
from benchmarks.harness.results import IN_PROCESS, System
from builders.onnx_export import ctr_network
from tests.conftest import NEEDS_GPU
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY

CANDIDATES = np.array([5, 7, 9, 11], dtype=np.int64)
EXPECTED = np.array([0.1, 0.4, 0.3, 0.2], dtype=np.float64)


def test_agreement_of_the_reference_order_is_zero() -> None:
    ids, scores = np.array([7, 9, 11]), np.array([0.4, 0.3, 0.2])
    assert gpu_ctr_checks.agreement(ids, scores, CANDIDATES, EXPECTED) == pytest.approx((0.0, 0.0))


def test_agreement_measures_swaps_score_errors_and_cut_items() -> None:
    diff, inversion = gpu_ctr_checks.agreement(
        np.array([9, 7]), np.array([0.3, 0.41]), CANDIDATES, EXPECTED
    )
    assert diff == pytest.approx(0.01, abs=1e-6)
    assert inversion == pytest.approx(0.1, abs=1e-6)  # 7 (0.4) ranked after 9 (0.3)
    _, left_out = gpu_ctr_checks.agreement(np.array([9]), np.array([0.3]), CANDIDATES, EXPECTED)
    assert left_out == pytest.approx(0.1, abs=1e-6)  # 7 was cut though it beats 9


def test_agreement_rejects_ids_that_are_not_candidates() -> None:
    with pytest.raises(gpu_ctr_checks.AnswersDiffer, match="not candidates"):
        gpu_ctr_checks.agreement(np.array([7, 8]), np.array([0.4, 0.3]), CANDIDATES, EXPECTED)


def test_agreement_with_repeated_candidates() -> None:
    candidates = np.array([5, 5, 7], dtype=np.int64)
    expected = np.array([0.2, 0.2, 0.6])
    ids, scores = np.array([7, 5, 5]), np.array([0.6, 0.2, 0.2])
    assert gpu_ctr_checks.agreement(ids, scores, candidates, expected) == pytest.approx((0.0, 0.0))


def test_check_raises_above_the_tolerance() -> None:
    request = gpu_ctr_checks.RankRequest(np.array([1, 2]), CANDIDATES)
    good = (np.array([7, 9]), np.array([0.4, 0.3]))
    assert gpu_ctr_checks.check("x", [good], [request], [EXPECTED], 1e-5) == pytest.approx(
        (0.0, 0.0)
    )
    off = (np.array([7, 9]), np.array([0.4, 0.31]))
    with pytest.raises(gpu_ctr_checks.AnswersDiffer, match=r"scores off by 1\.00e-02"):
        gpu_ctr_checks.check("x", [off], [request], [EXPECTED], 2e-3)


def test_triton_body_is_kserve_v2_json() -> None:
    request = gpu_ctr_checks.RankRequest(np.array([], dtype=np.int64), CANDIDATES)
    body = gpu_ctr_checks.triton_body(request, 3)
    assert body["inputs"][0] == {"name": "HISTORY", "datatype": "INT64", "shape": [0], "data": []}
    assert body["inputs"][1]["shape"] == [4] and body["inputs"][1]["data"] == [5, 7, 9, 11]
    assert body["inputs"][2] == {"name": "TOP_K", "datatype": "INT32", "shape": [1], "data": [3]}
    assert len(gpu_ctr_checks.triton_body(request)["inputs"]) == 2
    assert gpu_ctr_checks.naive_body(request) == {"history": [], "candidates": [5, 7, 9, 11]}


def test_ranking_users_follow_the_inputs_rule() -> None:
    requests, log = gpu_ctr_checks.ranking_users(200)
    assert len(requests) == 200 and len(log) >= 200 * gpu_ctr_checks.CANDIDATES
    np.testing.assert_array_equal(requests[3].candidates, log.candidates[96:128])
    np.testing.assert_array_equal(requests[3].history, log.histories[3])


def test_in_process_reference_is_the_pytorch_network() -> None:
    requests, log = gpu_ctr_checks.ranking_users(8)
    knobs = dataclasses.replace(gpu_ctr.QUICK, users_per_forward=(1, 2), in_process_s=0.01)
    systems, reference, auc = gpu_ctr_in_process.in_process(requests, log, "cpu", knobs)
    model = ctr_network.load(BUILD_DIR / "ctr" / "model.pt")
    for request, got in zip(requests, reference, strict=True):
        np.testing.assert_allclose(
            got, ctr_network.predict(model, gpu_ctr_in_process._rows(request)), atol=1e-6
        )
    assert [s.key for s in systems] == ["torch_fp32_u1", "torch_fp32_u2"]
    assert all(s.levels[0].throughput > 0 and s.levels[0].requests >= 3 for s in systems)
    assert 0.7 < auc < 1.0


def _level(c: int, rate: float, p99: float) -> Measurement:
    return Measurement(c, rate, p99 / 2, p99, p99, 100, 0)


def _systems(served_rate: float) -> list[System]:
    return [
        System("ctr_ranking", "torch_fp32_u64", "PyTorch FP32 64", IN_PROCESS,
               levels=[_level(0, 2000, 5)]),
        System("ctr_ranking", "torch_fp16_u256", "PyTorch FP16 256", IN_PROCESS,
               levels=[_level(0, 4000, 9)]),
        System("ctr_ranking", "naive_w1", "naive 1", "python",
               levels=[_level(1, 300, 4), _level(16, 400, 60)]),
        System("ctr_ranking", "naive_w4", "naive 4", "python",
               levels=[_level(1, 300, 4), _level(16, 800, 30)]),
        System("ctr_ranking", "triton_python_load", "served", "python",
               levels=[_level(1, 500, 3), _level(16, served_rate, 20)],
               values={"fp16": 0.0, "ctr_preprocess.queue_ms": 0.1, "ctr_preprocess.input_ms": 0.1,
                       "ctr_preprocess.infer_ms": 0.3, "ctr_preprocess.output_ms": 0.1,
                       "ctr_preprocess.instances": 2.0}),
    ]  # fmt: skip


def test_summary_judges_against_the_faster_naive_layout_and_the_served_precision() -> None:
    text = "\n".join(gpu_ctr_summary.summary(_systems(4400)))
    assert "**11.00×** (for reference: the slower naive layout)" in text
    assert (
        "**5.50×** (goal ≥ 5×: met, judged against the faster naive layout); p99 20.0 vs 30.0 ms"
        ": lower" in text
    )  # 4 workers: judged
    assert "vs PyTorch FP32 64 2000 users/s: **2.20×** (goal ≥ 1×: met)" in text
    assert "Fastest in-process: PyTorch FP16 256" in text
    assert "ctr_preprocess queue 0.10 / compute 0.50 (≤ 4000 req/s)" in text
    missed = "\n".join(gpu_ctr_summary.summary(_systems(1600)))
    assert "**2.00×** (goal ≥ 5×: missed by 60 %, judged against the faster" in missed
    assert "**0.80×** (goal ≥ 1×: missed by 20 %)" in missed


def test_summary_without_a_served_level() -> None:
    systems = [s for s in _systems(1000) if not s.key.startswith("triton")]
    assert "Not evaluated" in "\n".join(gpu_ctr_summary.summary(systems))
    nothing_answered = _systems(0.0)  # a level whose window saw no answer
    assert "Not evaluated" in "\n".join(gpu_ctr_summary.summary(nothing_answered))


def test_precision_of_the_cpu_set_and_a_missing_program() -> None:
    assert gpu_ctr_checks.program_precision("cpu") == "fp32"
    if (MODEL_REPOSITORY / "ctr_model" / "1" / "torch_metadata.json").is_file():
        pytest.skip("this host has a torch_gpu program")
    with pytest.raises(FileNotFoundError, match="make artifacts-gpu"):
        gpu_ctr_checks.program_precision("torch_gpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_cuda_without_a_gpu_is_an_explicit_error(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="no CUDA GPU visible"):
        gpu_ctr.run_section(True, tmp_path)


@pytest.mark.server
@pytest.mark.gpu
@NEEDS_GPU
def test_quick_section_on_the_gpu(tmp_path) -> None:
    systems = gpu_ctr.run_section(True, tmp_path)
    measured = {s.key for s in systems if s.levels}
    assert {"torch_fp32_u1", "torch_fp16_u64", "naive_w1", "triton_python_load"} <= measured
    assert "Not evaluated" not in "\n".join(gpu_ctr_summary.summary(systems))
