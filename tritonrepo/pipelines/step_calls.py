"""The models a described function step calls (``calls``), as plain callables.

A function step that declares ``calls = ["recogniser"]`` is called ``function(inputs,
models)``; ``models["recogniser"](tensors)`` runs that model on ``tensors`` (``{input name:
batch-first numpy array}``, the names and dims of the called model's config) and returns all of
its outputs the same way. In the served step the call goes through BLS
(:class:`tritonrepo.pipelines.function_step.FunctionStep`); in the generator's checks and the
generated tests it runs the same ONNX model with ONNX Runtime in one process.

A failed call raises :class:`ModelCallError` (a ``RuntimeError``): raised out of the function, it
becomes the error of the request being served (an internal error), and the other requests of
the batch are served.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import numpy as np

Tensors = dict[str, np.ndarray]
Infer = Callable[[str, Tensors], Tensors]  # (model name, inputs) -> outputs; raises on error


class ModelCallError(RuntimeError):
    """A called model answered with an error; the message names the model and its error."""


class ModelCall:
    """One declared model: ``call(tensors) -> tensors`` (see the module docstring).

    Args:
        key: the description's name for it (``[models.<key>]``).
        model: the served model's name.
        infer: what runs it.
    """

    def __init__(self, key: str, model: str, infer: Infer) -> None:
        self.key, self.model, self._infer = key, model, infer

    def __call__(self, tensors: Mapping[str, np.ndarray]) -> Tensors:
        """The model's outputs for ``tensors``.

        Raises:
            ValueError: ``tensors`` is not a dict of numpy arrays.
            ModelCallError: the model failed (its message kept).
        """
        if not isinstance(tensors, Mapping) or not all(
            isinstance(v, np.ndarray) for v in tensors.values()
        ):
            raise ValueError(f"models['{self.key}'] takes a dict of numpy arrays")
        return self._infer(self.model, {k: np.ascontiguousarray(v) for k, v in tensors.items()})

    def __repr__(self) -> str:
        return f"ModelCall({self.key!r} -> {self.model!r})"


class Models(Mapping[str, ModelCall]):
    """The declared models of a step, ``{key: ModelCall}`` (read-only)."""

    def __init__(self, names: Mapping[str, str], infer: Infer) -> None:
        self._calls = {key: ModelCall(key, model, infer) for key, model in names.items()}

    def __getitem__(self, key: str) -> ModelCall:
        try:
            return self._calls[key]
        except KeyError:
            declared = ", ".join(self._calls) or "none"
            raise KeyError(f"'{key}' is not declared in this step's calls ({declared})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._calls)

    def __len__(self) -> int:
        return len(self._calls)


def parse_models(value: str) -> dict[str, str]:
    """``{key: model}`` from the ``models`` parameter: ``"key=model,key2=model2"``.

    Raises:
        ValueError: an entry is not ``key=model``.
    """
    pairs = {}
    for entry in filter(None, (e.strip() for e in value.split(","))):
        key, sep, model = entry.partition("=")
        if not sep or not key or not model:
            raise ValueError(f"models parameter entry {entry!r} is not 'key=model'")
        pairs[key] = model
    return pairs


def format_models(names: Mapping[str, str]) -> str:
    """The ``models`` parameter for ``{key: model}`` (:func:`parse_models` reads it)."""
    return ",".join(f"{k}={v}" for k, v in names.items())
