"""Build the ``torch_gpu`` config set's programs: ``torch.export`` of each core model.

For a GPU host without NVIDIA's container (so without TensorRT): PyTorch runs the model on the GPU
through the Python-based backend ``backends/torch_python``. Run it on the host that serves, as
``make artifacts-gpu`` does: an exported program records the device and PyTorch version it was
traced with (``tritonrepo.runners.torch_runner.check_program_metadata`` refuses another version).

Writes, per model, ``<model>/1/model.pt2`` and ``<model>/1/torch_metadata.json`` (through
``builders.metadata``, with its common fields ``built_by``, ``versions`` and ``sha256``).
``model.pt2`` is the exported program (``torch.export.save``); with ``--format aotinductor`` it is
that program compiled by AOTInductor (``builders/torch_programs/compiled.py``), the package
NVIDIA's container serves with ``platform: "torch_aoti"`` and the development runner serves
too. The programs:

* ``text_embedding_encoder``: the BERT encoder of all-MiniLM-L6-v2 from the source weights
  followed by attention-masked mean pooling, inputs ``input_ids``/``attention_mask`` INT64
  ``[batch, seq]``, output ``sentence_embedding`` FP32 ``[batch, 384]`` (the encoder runs in the
  build precision, the pooling sums in FP32); batch 1..``max_batch_size`` of
  ``configs/torch_gpu.pbtxt``, seq 1..256 (``tritonrepo.text.spec.MAX_SEQ_LENGTH``).
* ``ctr_model``: ``builders.onnx_export.ctr_network.ExportGraph`` of the trained weights (``make
  artifacts``), ``input_ids`` INT64 ``[batch, 64]`` → ``ctr`` FP32 ``[batch, 1]``.
* a described core whose ``build()`` returns a torch module and that has ``[model.torch_gpu]``
  (e.g. ``digit_scans_model``): the module ``make artifacts`` saved (``1/module.pt``), inputs as
  its ONNX graph's, gated by the lowest per-row cosine of its outputs against the FP32 module on
  the pipeline's samples (``builders/torch_programs/described_export.py``).
* ``image_classifier`` (EfficientNet-Lite0, ImageNet weights) and ``image_classifier_resnet50``
  (random weights, seed 0): ``pixels`` FP32 ``[batch, 3, 224, 224]`` → ``logits`` FP32 ``[batch,
  1000]`` (``builders/torch_programs/image_export.py``, which also gates them: top-1/top-5 on real
  photographs equal to FP32 up to near-ties).

Accuracy gate, after each export, against the FP32 PyTorch model on the same device and real
inputs, with the TensorRT plans' tolerances (``builders.gates.accuracy_gate.TOLERANCES``): the text
encoder's pooled embeddings on real mixed texts (min cosine); the CTR scores on held-out
click-log rows (max abs diff and AUC change). A failed gate writes nothing.
Files are written to a temporary name and renamed, so an interrupted build leaves no
half-written program.

Precision ``auto`` (the default, what ``make artifacts-gpu`` builds) tries FP16 and falls back to
FP32 for a model whose FP16 program fails its gate ("FP16 where accuracy holds"); the metadata
says which, and why.

Usage: ``python -m builders.torch_programs.export [--model NAME ...] [--precision auto|fp16|fp32]
[--device cuda:0] [--repository DIR] [--format aotinductor|torch.export]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from builders.file_digest import sha256
from builders.gates.accuracy_gate import TOLERANCES, Tolerance
from builders.metadata import write_metadata
from builders.torch_programs import compiled as compiled_program
from builders.torch_programs import described_export
from builders.torch_programs import image_export as image_torch_export
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.image import spec as image_spec
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY
from tritonrepo.runners.torch_runner import AOTI_FORMAT, EXPORT_FORMAT, METADATA_FILE
from tritonrepo.text import spec as text_spec
from tritonrepo_format.config_sets import TORCH_GPU_SET, config_path
from tritonrepo_format.configs import core_runtime_models, load_config

CONFIG_SET = TORCH_GPU_SET
# The models whose torch_gpu config runs a torch.export program (backend torch_python).
MODELS = tuple(core_runtime_models(MODEL_REPOSITORY, CONFIG_SET))
CTR_WEIGHTS = BUILD_DIR / "ctr" / "model.pt"
GATE_TEXTS = 256  # real mixed texts (reference_data.text_corpus, eval split)
GATE_ROWS = 4096  # held-out click-log rows
BUILT_BY = "builders.torch_programs.export"  # this module (``__name__`` under -m: __main__)
LIBRARIES = ("torch", "numpy")


# One precision's accuracy floor: builders.gates.accuracy_gate.TOLERANCES, shared with the TensorRT
# plans (min cosine of embeddings; max abs CTR diff and |AUC change| against FP32).
GATES = TOLERANCES
PRECISIONS = ("fp16", "fp32")  # torch.export programs; INT8 is the TensorRT and CPU builders'


def max_batch(repository: Path, model: str) -> int:
    """``max_batch_size`` of ``model``'s ``torch_gpu`` config: the program's largest batch."""
    return load_config(config_path(repository, model, CONFIG_SET)).max_batch_size


def device_facts(device: str) -> dict[str, str]:
    """PyTorch version, and the GPU's name and compute capability (``"cpu"`` on a CPU)."""
    import torch

    facts = {"torch_version": torch.__version__, "device": device}
    if device.startswith("cuda"):
        major, minor = torch.cuda.get_device_capability(device)
        facts |= {
            "device_name": torch.cuda.get_device_name(device),
            "compute_capability": f"{major}.{minor}",
            "cuda_version": str(torch.version.cuda),
        }
    else:
        facts |= {"device_name": "cpu", "compute_capability": ""}
    return facts


def export_text_encoder(device: str, precision: str, batch: int, source: Path):
    """The encoder as an exported program, and the FP32 reference model on ``device``.

    Returns:
        ``(ExportedProgram, fp32 torch.nn.Module)``; both map ``(input_ids, attention_mask)``
        INT64 ``[b, s]`` to ``sentence_embedding`` FP32 ``[b, 384]`` (masked mean of the
        token embeddings, :func:`tritonrepo.text.pooling.mean_pool_torch`).
    """
    import torch
    from transformers import AutoModel

    from tritonrepo.text.pooling import mean_pool_torch

    class Encoder(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            tokens = self.model(input_ids=input_ids, attention_mask=attention_mask)
            return mean_pool_torch(tokens.last_hidden_state, attention_mask)

    dtype = {"fp16": torch.float16, "fp32": torch.float32}[precision]
    model = Encoder(AutoModel.from_pretrained(source, dtype=dtype)).to(device).eval()
    reference = Encoder(AutoModel.from_pretrained(source, dtype=torch.float32)).to(device).eval()
    ids = torch.ones(2, 9, dtype=torch.int64, device=device)
    mask = torch.ones(2, 9, dtype=torch.int64, device=device)
    mask[1, 5:] = 0
    dims = {
        0: torch.export.Dim("batch", min=1, max=batch),
        1: torch.export.Dim("seq", min=1, max=text_spec.MAX_SEQ_LENGTH),
    }
    with torch.no_grad():
        program = torch.export.export(
            model, (ids, mask), dynamic_shapes={"input_ids": dims, "attention_mask": dims}
        )
    return program, reference


def text_gate(program, reference, device: str, gate: Tolerance) -> dict[str, float]:
    """Min cosine of the program's (normalised) sentence embeddings vs FP32 on real mixed texts.

    Raises:
        RuntimeError: below ``gate.min_cosine``.
    """
    import torch

    from reference_data.text_corpus import real_texts
    from tritonrepo.text.tokenization import TextTokenizer

    tokenizer = TextTokenizer(
        Path(text_spec.source_model_dir()) / "tokenizer.json", text_spec.MAX_SEQ_LENGTH
    )
    module, worst = program.module(), 1.0
    texts = real_texts(GATE_TEXTS)
    with torch.no_grad():
        for start in range(0, len(texts), 32):
            ids, mask = (
                torch.as_tensor(a, device=device)
                for a in tokenizer.encode(texts[start : start + 32])
            )
            got = torch.nn.functional.normalize(module(ids, mask), dim=1)
            want = torch.nn.functional.normalize(reference(ids, mask), dim=1)
            worst = min(worst, float((got * want).sum(dim=1).min()))
    if worst < gate.min_cosine:
        raise RuntimeError(f"accuracy gate: min cosine {worst:.6f} < {gate.min_cosine}")
    return {"min_cosine_vs_fp32": round(worst, 6), "texts": len(texts)}


def export_ctr_model(device: str, precision: str, batch: int, weights: Path = CTR_WEIGHTS):
    """``ExportGraph`` of the trained CTR network as an exported program, and the FP32
    reference on ``device`` (``input_ids`` INT64 ``[b, 64]`` → ``ctr`` FP32 ``[b, 1]``; the
    FP16 program casts its output back to FP32)."""
    import torch

    from builders.onnx_export import ctr_network

    class Scorer(torch.nn.Module):
        def __init__(self, graph: torch.nn.Module) -> None:
            super().__init__()
            self.network = graph

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.network(input_ids).float()

    dtype = {"fp16": torch.float16, "fp32": torch.float32}[precision]
    # The trained CtrTransformer itself, not the ONNX export's ExportGraph: exported, its
    # attention is PyTorch's scaled_dot_product_attention (fused kernels that keep the softmax in
    # FP32), where ExportGraph's explicit q @ k.T, softmax, @ v runs three kernels in the program's
    # precision.
    model = Scorer(ctr_network.load(weights)).to(device, dtype).eval()
    reference = ctr_network.ExportGraph(ctr_network.load(weights)).to(device).eval()
    example = torch.ones(2, ctr_spec.SEQ_LENGTH, dtype=torch.int64, device=device)
    dims = {0: torch.export.Dim("batch", min=1, max=batch)}
    with torch.no_grad():
        program = torch.export.export(model, (example,), dynamic_shapes={"input_ids": dims})
    return program, reference


def ctr_gate(program, reference, device: str, gate: Tolerance) -> dict[str, float]:
    """Max abs CTR diff and AUC change vs FP32 on held-out click-log rows.

    Raises:
        RuntimeError: above ``gate.max_ctr_diff`` or an AUC change above ``gate.max_auc_change``.
    """
    import torch

    from builders.onnx_export.ctr import HELDOUT_ROWS, auc
    from reference_data.click_log import HELDOUT_SPLIT, ClickLogGenerator

    heldout = ClickLogGenerator().sample(HELDOUT_ROWS, HELDOUT_SPLIT)
    rows = torch.as_tensor(heldout.rows[:GATE_ROWS], device=device)
    module = program.module()
    with torch.no_grad():
        got = torch.cat([module(rows[i : i + 512]) for i in range(0, len(rows), 512)])
        want = torch.cat([reference(rows[i : i + 512]) for i in range(0, len(rows), 512)])
    got_np, want_np = (t.float().cpu().numpy().reshape(-1) for t in (got, want))
    clicks = heldout.clicks[:GATE_ROWS]
    diff = float(np.max(np.abs(got_np - want_np)))
    auc_change = auc(clicks, got_np) - auc(clicks, want_np)
    if diff > gate.max_ctr_diff or abs(auc_change) > gate.max_auc_change:
        raise RuntimeError(
            f"accuracy gate: max abs CTR diff {diff:.2e} (limit "
            f"{gate.max_ctr_diff}), AUC change {auc_change:+.4f}"
        )
    return {
        "max_abs_ctr_diff_vs_fp32": diff,
        "auc_change_vs_fp32": round(auc_change, 5),
        "rows": len(rows),
    }


def build(
    model: str, repository: Path, device: str, precision: str, program_format: str = EXPORT_FORMAT
) -> dict:
    """Export ``model``, compile it (``program_format``), gate what will serve, and write
    ``model.pt2`` + ``torch_metadata.json`` in ``<repository>/<model>/1/``.

    ``program_format``: :data:`EXPORT_FORMAT` (the exported program; the default) or
    :data:`AOTI_FORMAT` (that program compiled into an AOTInductor package: what the
    ``torch_aoti`` set serves in NVIDIA's container).

    Returns:
        The metadata written.

    Raises:
        RuntimeError: the accuracy gate failed, or the program could not be compiled (nothing
            is written).
        FileNotFoundError: the source weights are missing (``make setup``, ``make artifacts``).
    """
    import torch

    batch = max_batch(repository, model)
    gate = GATES[precision]
    if model == text_spec.ENCODER_MODEL:
        source = Path(text_spec.source_model_dir())
        program, reference = export_text_encoder(device, precision, batch, source)

        def check(built):
            return text_gate(built, reference, device, gate)

        inputs = {name: ["batch", "seq"] for name in text_spec.ENCODER_INPUTS}
        source_file = source / "model.safetensors"
        shapes = {"batch": [1, batch], "seq": [1, text_spec.MAX_SEQ_LENGTH]}
    elif model == ctr_spec.CORE_MODEL:
        program, reference = export_ctr_model(device, precision, batch)

        def check(built):
            return ctr_gate(built, reference, device, gate)

        inputs = {ctr_spec.CORE_INPUT: ["batch", ctr_spec.SEQ_LENGTH]}
        source_file = CTR_WEIGHTS
        shapes = {"batch": [1, batch]}
    elif model in image_torch_export.MODELS:
        gate = image_torch_export.GATES[precision]
        program, reference = image_torch_export.export_image_model(model, device, precision, batch)

        def check(built):
            return image_torch_export.image_gate(built, reference, device, gate)

        inputs = {image_spec.CORE_INPUT: ["batch", 3, 224, 224]}
        source_file = image_torch_export.source_file(model)
        shapes = {"batch": [1, batch]}
    elif model in (described := described_export.described_cores()):
        pipeline = described[model]
        program, reference, feeds, inputs = described_export.export_described(
            pipeline, repository, device, precision, batch
        )

        def check(built):
            return described_export.described_gate(built, reference, feeds, device, gate.min_cosine)

        source_file = described_export.module_path(repository, pipeline)
        shapes = {"batch": [1, batch]}
    else:
        raise ValueError(f"no torch export for {model}; known: {MODELS}")
    config = load_config(config_path(repository, model, CONFIG_SET))
    compiled_program.check_container_config(
        repository, model, list(inputs), [o.name for o in config.output],
        len(program.graph_signature.user_outputs),
    )  # fmt: skip
    out_dir = repository / model / "1"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "model.pt2"
    partial = out_dir / "model.partial.pt2"  # both writers want a .pt2 name
    compiled = {}
    try:
        if program_format == AOTI_FORMAT:
            seconds = compiled_program.compile_package(program, partial)
            accuracy = check(compiled_program.CompiledProgram(partial, device))
            compiled = {"compile_s": round(seconds, 1)}
        else:
            accuracy = check(program)
            torch.export.save(program, str(partial))
    except BaseException:
        partial.unlink(missing_ok=True)  # a failed compile or gate writes nothing
        raise
    metadata = (
        {
            "model": model,
            "format": program_format,
            "precision": precision,
            "max_batch": batch,
            "shapes": shapes,
            "inputs": inputs,
            "accuracy": accuracy,
            "gate": asdict(gate),
            "source_sha256": sha256(source_file),
            "program_sha256": sha256(partial),
            "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        | compiled
        | device_facts(device)
    )
    os.replace(partial, target)
    return _write(out_dir, metadata)


def _write(out_dir: Path, metadata: dict) -> dict:
    """``torch_metadata.json`` next to ``out_dir/model.pt2``; returns the record written."""
    return write_metadata(
        out_dir / METADATA_FILE,
        metadata,
        built_by=BUILT_BY,
        libraries=LIBRARIES,
        artifacts={"model.pt2": out_dir / "model.pt2"},
    )


def build_auto(
    model: str, repository: Path, device: str, program_format: str = EXPORT_FORMAT
) -> dict:
    """:func:`build` in FP16, or in FP32 when the FP16 program fails its accuracy gate.

    Raises:
        RuntimeError: the FP32 program fails its gate too.
    """
    try:
        return build(model, repository, device, "fp16", program_format)
    except RuntimeError as exc:
        rejected = str(exc)
    print(f"{model}: FP16 failed its {rejected}; building FP32", flush=True)
    metadata = build(model, repository, device, "fp32", program_format)
    return _write(repository / model / "1", metadata | {"fp16_rejected": rejected})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", choices=MODELS, help="default: all")
    parser.add_argument("--precision", choices=["auto", *PRECISIONS], default="auto")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument(
        "--format",
        choices=[AOTI_FORMAT, EXPORT_FORMAT],
        default=EXPORT_FORMAT,
        help="the program's format (default: torch.export; aotinductor for the torch_aoti set)",
    )
    args = parser.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            f"error: no CUDA device visible to PyTorch {torch.__version__}: run this on the "
            "GPU host that serves (make artifacts-gpu)",
            file=sys.stderr,
        )
        return 2
    for model in args.model or MODELS:
        try:
            if args.precision == "auto":
                metadata = build_auto(model, args.repository, args.device, args.format)
            else:
                metadata = build(model, args.repository, args.device, args.precision, args.format)
        except (RuntimeError, FileNotFoundError, ValueError) as exc:
            print(f"error: {model}: {exc}", file=sys.stderr)
            return 1
        compile_s = f", compiled in {metadata['compile_s']} s" if "compile_s" in metadata else ""
        print(
            f"{model}: {metadata['format']} {metadata['precision']} on "
            f"{metadata['device_name']}{compile_s}, accuracy {metadata['accuracy']}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
