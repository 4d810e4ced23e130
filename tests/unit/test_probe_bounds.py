"""A declared probe's bounds (``min``, ``max``, ``values_in``, ``order``:
:mod:`tritonrepo_client.control.probe_declaration`): what any healthy model answers when the
values themselves depend on trained weights, e.g. a ranking's CTRs."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tritonrepo_client.connection import ClientError
from tritonrepo_client.control.probe_declaration import InvalidProbe, declared_probe

CANDIDATES = [11, 222, 3333]


class Answering:
    """A connection whose model answers ``outputs``."""

    def __init__(self, outputs: dict[str, np.ndarray]) -> None:
        self.outputs = outputs

    def infer(self, model: str, inputs: dict[str, np.ndarray], names: list[str], **_: Any):
        return {name: self.outputs[name] for name in names}


def ranking_probe(**scores: Any) -> Any:
    declaration = {
        "inputs": [{"name": "CANDIDATES", "datatype": "INT64", "shape": [3], "data": CANDIDATES}],
        "outputs": [
            {"name": "ITEM_IDS", "datatype": "INT64", "shape": [3], "values_in": CANDIDATES},
            {"name": "SCORES", "datatype": "FP32", "shape": [3], **scores},
        ],
    }
    config = {
        "parameters": {"tritonrepo_probe": {"string_value": json.dumps(declaration)}},
        "output": [{"name": "ITEM_IDS"}, {"name": "SCORES"}],
    }
    return declared_probe(config, "ranking")


def answer(ids: list[int], scores: list[float]) -> Answering:
    return Answering({"ITEM_IDS": np.array(ids), "SCORES": np.array(scores, np.float32)})


def test_a_healthy_ranking_passes_its_bounds():
    probe = ranking_probe(min=0.0, max=1.0, order="descending")
    detail = probe(answer([222, 11, 3333], [0.53, 0.51, 0.50]), "ranking")
    assert detail == "declared probe answered: ITEM_IDS [3] as declared, SCORES [3] as declared"


@pytest.mark.parametrize(
    ("ids", "scores", "message"),
    [
        ([222, 11, 3333], [1.2, 0.5, 0.4], "SCORES has 1.2, above the declared max 1.0"),
        ([222, 11, 3333], [0.5, 0.4, -0.1], "below the declared min 0.0"),
        ([222, 11, 3333], [0.4, 0.5, 0.3], "SCORES is not in descending order"),
        ([222, 11, 7], [0.5, 0.4, 0.3], r"ITEM_IDS has \[7.0\], not among \[11.0, 222.0, 3333.0\]"),
    ],
)
def test_an_answer_outside_its_bounds_fails_naming_it(ids, scores, message):
    probe = ranking_probe(min=0.0, max=1.0, order="descending")
    with pytest.raises(ClientError, match=message):
        probe(answer(ids, scores), "ranking")


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        ({"order": "sorted"}, r"'order' is 'sorted'; give one of \['descending', 'ascending'\]"),
        ({"min": "low"}, "'min' is 'low'; give a finite number"),
        ({"min": float("nan")}, "'min' is nan; give a finite number"),
        ({"max": float("inf")}, "'max' is inf; give a finite number"),
        ({"min": True}, "'min' is True; give a finite number"),
        ({"min": 0.9, "max": 0.1}, "'min' 0.9 is above 'max' 0.1; no answer could pass"),
        ({"values_in": []}, "'values_in' is \\[\\]; give a non-empty list"),
        ({"ordr": "descending"}, "unknown field 'ordr' \\(did you mean 'order'\\?\\)"),
    ],
)
def test_a_malformed_bound_is_refused(bounds, message):
    """Every bound that could never fail, or never pass, or is misspelt (and so would be
    dropped) is refused, naming it."""
    with pytest.raises(InvalidProbe, match=message):
        ranking_probe(**bounds)


def test_bounds_on_text_and_outputs_declared_twice_are_refused():
    def probe(outputs: list[dict]) -> Any:
        declaration = {
            "inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [1, 1], "data": ["x"]}],
            "outputs": outputs,
        }
        config = {"parameters": {"tritonrepo_probe": {"string_value": json.dumps(declaration)}}}
        return declared_probe(config, "labels")

    with pytest.raises(InvalidProbe, match=r"\['order'\] bound numbers; a BYTES output"):
        probe([{"name": "LABELS", "datatype": "BYTES", "order": "ascending"}])
    with pytest.raises(InvalidProbe, match=r"outputs \['LABELS'\] are declared twice"):
        probe([{"name": "LABELS"}, {"name": "LABELS", "shape": [1, 1]}])
