"""A one-step GPU model (``one_step_gpu = true``, the torch_gpu set) made servable on this CPU,
for the server tests of ``text_embedding`` and ``digit_scans``."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from builders.torch_programs import export as torch_export
from tests.program_cache import cpu_program, text_encoder_sources
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.text import spec as text_spec


def one_step_on_cpu(root: Path, pipeline: str, stages: Sequence[str], core: str) -> None:
    """Copy the folders of ``pipeline`` and its ``stages`` into ``root`` (no ``*.onnx``), export
    ``core``'s program there on the CPU in FP32 (what ``make artifacts-gpu`` does on a GPU host)
    and change the one-step model's ``configs/torch_gpu.pbtxt`` instance group from ``KIND_GPU``
    to ``KIND_CPU`` (this machine has no GPU: every stage then runs on the host).

    Raises:
        AssertionError: the config has no ``KIND_GPU`` instance group to change.
    """
    for model in (pipeline, *stages):
        shutil.copytree(
            MODEL_REPOSITORY / model, root / model, ignore=shutil.ignore_patterns("*.onnx")
        )
    if core == text_spec.ENCODER_MODEL:  # the slow export, shared with test_torch_export.py
        cpu_program(core, root, text_encoder_sources())
    else:
        torch_export.build(core, root, "cpu", "fp32")
    config = root / pipeline / "configs" / "torch_gpu.pbtxt"
    text = config.read_text()
    assert "kind: KIND_GPU" in text
    config.write_text(text.replace("kind: KIND_GPU", "kind: KIND_CPU"))


def largest_batch(http_url: str, model: str) -> int:
    """The largest batch ``model`` has executed on the server at ``http_url`` (Triton's
    ``batch_stats``; 0 when it has executed none)."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(http_url)
    try:
        batches = client.get_inference_statistics(model)["model_stats"][0]["batch_stats"]
    finally:
        client.close()
    return max((int(b["batch_size"]) for b in batches), default=0)
