"""Typed config parameters of the Python-backend steps, declared once per step.

A model config's ``parameters`` are strings (``parameters { key: "max_seq_length" value {
string_value: "256" } }``). Each step declares the ones it reads as a tuple of
:class:`Parameter` (name, kind, default, unit, one-line meaning) in its ``PARAMETERS`` class
attribute; :meth:`tritonrepo.step.python_step.PythonStep.initialize` parses the config's values
through that declaration with :func:`parse` before the step's ``setup``. A value that does not
parse, is out of range or is not one of the choices, a missing required parameter, and a key no
declaration knows (a misspelt key would otherwise leave the default in force unnoticed) all raise
one :class:`ParameterError` naming the model and the key, e.g.::

    text_embedding_tokenize: parameter 'max_seq_length' = 'abc' is not an integer (tokens)

An exception from ``initialize`` fails the model's load in Triton's Python backend, and its text
is the load error (``POST v2/repository/models/<m>/load`` and the server log show it).

Keys read by something other than the step are exempt (:data:`NON_STEP_KEYS`).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["int", "float", "flag", "str", "choice", "names", "sizes"]

# Parameters some other reader owns; never reported as unknown. Sources: the Python backend's
# README ("Managing Python Runtime and Libraries", "Input tensor device placement") and
# tritonrepo_client's control plane (probe_declaration.PROBE_PARAMETER,
# config_sets.CONFIG_SET_PARAMETER, healing.healer.RESTART_PARAMETER,
# rollout.PREVIOUS_VERSION_PARAMETER, model_calls.CALLS_PARAMETER; checked by
# tests/unit/test_step_parameters.py).
NON_STEP_KEYS: Mapping[str, str] = {
    "EXECUTION_ENV_PATH": "Python backend: the packed Python environment the stub runs in",
    "FORCE_CPU_ONLY_INPUT_TENSORS": "Python backend: 'no' keeps GPU input tensors on the GPU",
    "tritonrepo_probe": "tritonrepo_client health checks: the model's probe request (JSON)",
    "tritonrepo_config_set": "tritonrepo_client configs use: the config set a reload came from",
    "tritonrepo_restart": "tritonrepo_client self-healing: marks a reload that restarts stubs",
    "tritonrepo.previous_version": "tritonrepo_client rollout: the version a rollout replaced",
    "tritonrepo_calls": "the launcher and tritonrepo_client: models this one calls through BLS",
    "tritonrepo_stages": "the preflight and make gpu-pack: models a one-step model runs in itself",
    "tritonrepo_openai_embeddings": "the HTTP guard's /v1/embeddings: the text input, the "
    "embedding and token-count outputs",
    "tritonrepo_as_version": "PythonStep: a canary's copy runs as this version of the named "
    "model (tritonrepo.step.served_copy)",
    "tritonrepo_canary": "tritonrepo_client canary: the pipeline's declared answer comparison",
    "tritonrepo_drift": "PythonStep's input-feature counters (tritonrepo.step.drift): the "
    "pipeline and its features function",
}


class _Required:
    """The default of a parameter the config must set."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

_KIND_WORDS = {
    "int": "an integer",
    "float": "a number",
    "flag": "'0' or '1'",
    "str": "a non-empty string",
    "choice": "one of the choices",
    "names": "comma-separated names",
    "sizes": "comma-separated positive integers",
}


class ParameterError(ValueError):
    """A model config's parameters do not fit the step's declaration.

    The message is ``<model>: <problem>[; <problem> ...]``, each problem naming its config key.

    Attributes:
        model: the model's name.
        problems: one line per wrong, missing or unknown key.
    """

    def __init__(self, model: str, problems: Sequence[str]) -> None:
        self.model = model
        self.problems = list(problems)
        super().__init__(f"{model}: " + "; ".join(self.problems))


@dataclass(frozen=True)
class Parameter:
    """One config parameter of a step.

    Attributes:
        name: the config key.
        kind: how its string value is read: ``int``, ``float`` (finite), ``flag`` (``"0"`` →
            False, ``"1"`` → True), ``str`` (non-empty; ``""`` means the default when the
            default is None), ``choice`` (one of ``choices``), ``names`` (comma-separated, empty
            entries dropped → ``tuple[str, ...]``), ``sizes`` (comma-separated positive integers,
            sorted and deduplicated → ``tuple[int, ...]``).
        default: the typed value used when the key is absent; :data:`REQUIRED` if it must be set.
        unit: unit of the value (``tokens``, ``bytes``, ``threads``); shown in errors.
        meaning: what it controls, one line.
        minimum: smallest allowed value (``int``, ``float``), inclusive.
        maximum: largest allowed value (``int``, ``float``), inclusive.
        choices: the allowed values of a ``choice``.
    """

    name: str
    kind: Kind
    default: Any
    unit: str = ""
    meaning: str = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def convert(self, text: str) -> Any:
        """The typed value of ``text``.

        Raises:
            ValueError: it does not fit; the message completes ``parameter 'name' = 'text' ...``
                (e.g. ``is not an integer (tokens)``).
        """
        unit = f" ({self.unit})" if self.unit else ""
        if self.kind == "int":
            try:
                value: Any = int(text.strip())
            except ValueError:
                raise ValueError(f"is not an integer{unit}") from None
            self._check_range(value, unit)
            return value
        if self.kind == "float":
            try:
                value = float(text.strip())
            except ValueError:
                raise ValueError(f"is not a number{unit}") from None
            if not math.isfinite(value):
                raise ValueError(f"is not a finite number{unit}")
            self._check_range(value, unit)
            return value
        if self.kind == "flag":
            if text.strip() not in ("0", "1"):
                raise ValueError("is not '0' or '1'")
            return text.strip() == "1"
        if self.kind == "choice":
            if text not in self.choices:
                raise ValueError(f"is not one of {', '.join(map(repr, self.choices))}")
            return text
        if self.kind == "names":
            return tuple(part.strip() for part in text.split(",") if part.strip())
        if self.kind == "sizes":
            return parse_sizes(text, unit)
        if not text:
            if self.default is None:
                return None
            raise ValueError("is empty")
        return text

    def _check_range(self, value: float, unit: str) -> None:
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"is below the minimum {_number(self.minimum)}{unit}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"is above the maximum {_number(self.maximum)}{unit}")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def parse_sizes(text: str, unit: str = "") -> tuple[int, ...]:
    """``"64, 1,2,2"`` → ``(1, 2, 64)``: comma-separated positive integers, sorted and
    deduplicated; ``""`` → ``()``.

    Raises:
        ValueError: an entry is not a positive integer (``is not comma-separated positive
            integers`` plus ``unit``).
    """
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        sizes = [0]
    if any(size <= 0 for size in sizes):
        raise ValueError(f"is not comma-separated positive integers{unit}")
    return tuple(sizes)


def parse(
    declared: Iterable[Parameter],
    values: Mapping[str, str],
    model: str,
    exempt: Iterable[str] = NON_STEP_KEYS,
) -> dict[str, Any]:
    """The typed value of every declared parameter, from a config's string ``values``.

    Args:
        declared: the step's parameters (``PARAMETERS``).
        values: the config's ``parameters`` as ``{key: string_value}``.
        model: the model's name, named in the error.
        exempt: keys that belong to other readers (default :data:`NON_STEP_KEYS`).

    Returns:
        ``{name: value}`` for every declared parameter: the config's value converted, else the
        default.

    Raises:
        ParameterError: a value does not fit its declaration, a required parameter is missing,
            or a key is neither declared nor exempt; one error listing every such key.
        ValueError: the step declares a name twice (a programming error, not a config one).
    """
    declared = list(declared)
    names = [p.name for p in declared]
    if len(set(names)) != len(names):
        raise ValueError(f"{model}: a parameter is declared twice: {names}")
    parsed: dict[str, Any] = {}
    problems: list[str] = []
    for parameter in declared:
        if parameter.name not in values:
            if parameter.required:
                problems.append(f"parameter '{parameter.name}' is required ({parameter.meaning})")
            else:
                parsed[parameter.name] = parameter.default
            continue
        text = values[parameter.name]
        try:
            parsed[parameter.name] = parameter.convert(text)
        except ValueError as exc:
            problems.append(f"parameter '{parameter.name}' = {text!r} {exc}")
    exempt = set(exempt)
    for key in values:
        if key not in names and key not in exempt:
            problems.append(_unknown(key, names))
    if problems:
        raise ParameterError(model, problems)
    return parsed


def _unknown(key: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    known = ", ".join(names) if names else "none"
    return f"unknown parameter '{key}'{hint}; this model's parameters: {known}"
