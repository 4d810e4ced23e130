"""The text encoder's TensorRT plan: an alias of ``builders.tensorrt.plans`` for that model.

Kept so existing commands keep working (``docker/README.md``). It builds only
``text_embedding_encoder`` and accepts the same options as ``builders.tensorrt.plans`` except
``--model``; the plan, its checks, accuracy gate and ``plan_metadata.json`` are that module's.

Usage: ``python -m builders.tensorrt.text_embedding [--version N] [--precision fp16|int8|fp32]
[--repository DIR]``
"""

from __future__ import annotations

import sys

from builders.tensorrt import plans as tensorrt_plans
from tritonrepo.text import spec


def main(argv: list[str] | None = None) -> int:
    """``python -m builders.tensorrt.plans --model text_embedding_encoder ARGS``; same exit
    status (1 with a one-line reason when TensorRT 10 is missing or a check fails)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return tensorrt_plans.main(["--model", spec.ENCODER_MODEL, *args])


if __name__ == "__main__":
    sys.exit(main())
