"""What each served name runs in each config set, read from the repository's configs, as the
table that README.md shows between the markers :data:`BEGIN` and :data:`END`.

``python -m tests.served_forms`` rewrites that table; ``tests/unit/test_served_forms.py`` fails
when it is stale, so the README cannot say what the configs do not. The rows are the models
``make serve`` loads (:func:`tritonrepo_format.roles.served_models`), the
columns the config sets of :data:`tritonrepo_format.config_sets.CONFIG_SETS`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from tritonrepo.paths import MODEL_REPOSITORY, REPO_ROOT
from tritonrepo_format.config_sets import CONFIG_SETS, DEFAULT_SET
from tritonrepo_format.configs import ensemble_steps, read_config
from tritonrepo_format.roles import (
    ONE_STEP_PARAMETER,
    STAGES_PARAMETER,
    calls_of,
    served_models,
)

README = REPO_ROOT / "README.md"
BEGIN = "<!-- served forms: python -m tests.served_forms writes this table -->"
END = "<!-- served forms: end -->"
SERVE_SET = "cpu"  # make serve's --model-config-name
RUNTIMES = {
    "tensorrt_plan": "TensorRT plan",
    "onnxruntime_python": "ONNX Runtime",
    "onnxruntime": "ONNX Runtime",
    "torch_python": "PyTorch program",
    "torch_aoti": "PyTorch backend",
    "python": "Python",
}


def _config(model: str, config_set: str) -> ModelConfig:
    return read_config(MODEL_REPOSITORY, model, None if config_set == DEFAULT_SET else config_set)


def _device(config: ModelConfig) -> str:
    kinds = {g.kind for g in config.instance_group}
    return "GPU" if kinds == {ModelInstanceGroup.KIND_GPU} else "CPU"


def runtime(model: str, config_set: str) -> str:
    """What runs ``model``'s config in ``config_set``, e.g. ``ONNX Runtime on CPU``."""
    config = _config(model, config_set)
    name = RUNTIMES.get(config.platform or config.backend, config.platform or config.backend)
    if config.platform == "tensorrt_plan":
        return name
    return f"{name} on {_device(config)}"


def _step(model: str, config_set: str) -> str:
    """An ensemble step: its name, with what runs it when that is not a Python step, or the
    models it calls through BLS."""
    config = _config(model, config_set)
    if config.backend != "python":
        return f"`{model}` ({runtime(model, config_set)})"
    calls = calls_of(config)
    if calls:
        return (
            f"`{model}` (calls "
            + ", ".join(f"`{c}`, {runtime(c, config_set)}" for c in calls)
            + ")"
        )
    return f"`{model}`"


def form(model: str, config_set: str) -> str:
    """One cell: the form of ``model`` in ``config_set`` and what runs its core."""
    config = _config(model, config_set)
    parameters = config.parameters
    stateful = " with sequence batching" if config.HasField("sequence_batching") else ""
    if config.platform == "ensemble":
        return "ensemble: " + " → ".join(_step(s, config_set) for s in ensemble_steps(config))
    if STAGES_PARAMETER in parameters:
        stages = len(parameters[STAGES_PARAMETER].string_value.split(","))
        return f"one Python model on the GPU, its {stages} stages in one execute"
    if ONE_STEP_PARAMETER in parameters:
        core = parameters[ONE_STEP_PARAMETER].string_value
        return (f"one Python model{stateful}: preprocess → `{core}` "
                f"({runtime(core, config_set)}) → postprocess, in one execute")  # fmt: skip
    calls = calls_of(config)
    if calls:
        called = ", ".join(f"`{c}` ({runtime(c, config_set)})" for c in calls)
        return f"Python session model{stateful}, calls {called}"
    return f"{runtime(model, config_set)}{stateful}"


def table() -> str:
    """The Markdown table (module docstring), without the markers."""
    sets = list(CONFIG_SETS)
    heads = []
    for name in sets:
        file = "config.pbtxt" if name == DEFAULT_SET else f"configs/{name}.pbtxt"
        note = ", what `make serve` loads" if name == SERVE_SET else ""
        heads.append(f"`{name}` (`{file}`{note})")
    lines = ["| served name | " + " | ".join(heads) + " |", "|---" * (len(sets) + 1) + "|"]
    for model in served_models(MODEL_REPOSITORY, SERVE_SET):
        lines.append(f"| `{model}` | " + " | ".join(form(model, s) for s in sets) + " |")
    return "\n".join(lines)


def rendered(text: str) -> str:
    """``text`` (the README) with the table between the markers replaced.

    Raises:
        ValueError: the markers are missing or out of order.
    """
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md needs the lines {BEGIN!r} and {END!r}, in that order")
    return text[: start + len(BEGIN)] + "\n" + table() + "\n" + text[end:]


def main(path: Path = README) -> int:
    """Rewrite the table in ``path``; exit 0."""
    text = path.read_text()
    new = rendered(text)
    if new != text:
        path.write_text(new)
        print(f"wrote the served-forms table of {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
