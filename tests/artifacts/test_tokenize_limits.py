"""The tokenize step with the built tokenizer (`make artifacts`) enforces each config's text
limit."""

from __future__ import annotations

import numpy as np
import pytest

from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.step.errors import InvalidRequest
from tritonrepo.text import spec
from tritonrepo_format.configs import load_config


@pytest.mark.parametrize("config_name", ["config.pbtxt", "configs/torch_gpu.pbtxt"])
def test_tokenize_step_enforces_the_configured_text_limit(config_name):
    from tritonrepo.text.steps import TokenizeStep

    model_dir = MODEL_REPOSITORY / spec.TOKENIZE_MODEL
    cfg = load_config(model_dir / config_name)
    assert int(cfg.parameters["max_text_bytes"].string_value) == spec.MAX_TEXT_BYTES == 65536
    step = TokenizeStep()  # what initialize() sets, without the Python backend
    step.model_name = spec.TOKENIZE_MODEL
    step.version_dir = model_dir / "1"
    step.parameters = {key: value.string_value for key, value in cfg.parameters.items()}
    step.setup()
    ok = np.array([[b"a " * (spec.MAX_TEXT_BYTES // 2)]], dtype=object)
    assert step.prepare({"TEXT": ok}) == ["a " * (spec.MAX_TEXT_BYTES // 2)]
    huge = np.array([[b"ok"], [b"word " * 320_000]], dtype=object)  # 1.6 MB, as measured
    with pytest.raises(
        InvalidRequest,
        match=r"TEXT\[1\] is 1600000 bytes, over the limit of 65536 bytes per text "
        r"\(parameter max_text_bytes\)",
    ):
        step.prepare({"TEXT": huge})
