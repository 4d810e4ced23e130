"""CUDA graphs over a bucket grid (tritonrepo.runners.cuda_graphs): the bucket choice and the config
parameters without a GPU; on a GPU, graph replays of the real encoder program against the same
program run eagerly, on ragged batches (``make test-gpu``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import NEEDS_GPU
from tritonrepo.runners.cuda_graphs import Grid

GRID = Grid(rows=(1, 2, 4, 8), positions=(16, 32, 64))


@pytest.mark.gpu
@NEEDS_GPU
def test_graph_replays_match_the_eager_program():
    """The served program (built by `make artifacts-gpu`), replayed from graphs over ragged
    batches of real texts, against the same program run eagerly on the same rows."""
    from google.protobuf.json_format import MessageToDict

    from reference_data.text_corpus import real_texts
    from tritonrepo.paths import MODEL_REPOSITORY
    from tritonrepo.runners.torch_runner import TorchRunner, graph_examples
    from tritonrepo.text import spec
    from tritonrepo.text.tokenization import TextTokenizer
    from tritonrepo_format.config_sets import config_path
    from tritonrepo_format.configs import load_config

    program = MODEL_REPOSITORY / spec.ENCODER_MODEL / "1" / "model.pt2"
    if not program.is_file():
        pytest.fail("no torch program: run `make artifacts-gpu` on this host")
    config = MessageToDict(  # as the stub sees it: dims as strings, types by name
        load_config(config_path(MODEL_REPOSITORY, spec.ENCODER_MODEL, "torch_gpu")),
        preserving_proto_field_name=True,
    )

    def runner() -> TorchRunner:
        return TorchRunner(
            program,
            device="cuda:0",
            output_names=[spec.ENCODER_OUTPUT],
            output_dtypes={spec.ENCODER_OUTPUT: torch.float32},
            max_batch=64,
            sequence_axis_inputs=spec.ENCODER_INPUTS,
            output_device="cpu",
        )

    eager, graphed = runner(), runner()
    assert graphed.capture_graphs(GRID, graph_examples(config)) == 12
    tokenizer = TextTokenizer(
        MODEL_REPOSITORY / spec.TOKENIZE_MODEL / "1" / "tokenizer.json", spec.MAX_SEQ_LENGTH
    )
    texts = real_texts(15, seed=11)
    requests = []
    for start, size in ((0, 1), (1, 3), (4, 2), (6, 1), (7, 8)):
        ids, mask = tokenizer.encode(texts[start : start + size])
        requests.append(
            {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        )
    for group in (requests[:1], requests[1:3], requests[3:], requests):  # in and out of the grid
        want = eager.run_batch(group)
        got = graphed.run_batch(group)
        for a, b in zip(want, got, strict=True):
            assert b[spec.ENCODER_OUTPUT].device.type == "cpu"
            np.testing.assert_allclose(
                b[spec.ENCODER_OUTPUT].numpy(), a[spec.ENCODER_OUTPUT].numpy(), atol=2e-3, rtol=0
            )
