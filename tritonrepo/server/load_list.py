"""Print what a server of the model repository loads at start, one model a line
(``python -m tritonrepo.server.load_list``): the served models (``--model``, default
:func:`tritonrepo.server.options.default_models`) and the models they call through BLS
(:attr:`tritonrepo.server.options.ServerOptions.load_models`), each callee before its caller.

The container's entrypoint (``docker/entrypoint.sh``) passes these to ``tritonserver
--load-model``, as the launcher does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.options import ServerOptions, default_models


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 after printing the list; 2 on a usage error."""
    parser = argparse.ArgumentParser(
        prog="python -m tritonrepo.server.load_list", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument(
        "--model",
        dest="models",
        action="append",
        help="a model to serve (default: the launcher's default models)",
    )
    parser.add_argument(
        "--model-config-name",
        default="cpu",
        help="configs/<name>.pbtxt as Triton resolves it ('' = config.pbtxt)",
    )
    args = parser.parse_args(argv)
    options = ServerOptions(
        model_repository=args.repository,
        models=tuple(args.models or default_models(args.repository)),
        model_config_name=args.model_config_name or None,
    )
    print("\n".join(options.load_models))
    return 0


if __name__ == "__main__":
    sys.exit(main())
