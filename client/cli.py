"""``tritonrepo-client``: command line for the models of this repository.

Examples::

    tritonrepo-client embed "A man is eating food." "A man eats."
    tritonrepo-client --protocol grpc embed --similarity "cat" "kitten" "car"
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import numpy as np
from tritonrepo_client.connection import DEFAULT_URLS, ClientError
from tritonrepo_client.embedding import EmbeddingClient, cosine_similarity_matrix


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tritonrepo-client", description=__doc__.splitlines()[0])
    p.add_argument(
        "--url", help="server host:port (default 127.0.0.1:8000 for http, 127.0.0.1:8001 for grpc)"
    )
    p.add_argument("--protocol", choices=sorted(DEFAULT_URLS), default="http")
    p.add_argument("--timeout", type=float, default=60.0, help="network timeout, seconds")
    sub = p.add_subparsers(dest="command", required=True)
    embed = sub.add_parser("embed", help="sentence embeddings from the text_embedding ensemble")
    embed.add_argument("texts", nargs="*", help="texts to embed (default: one per line of stdin)")
    embed.add_argument(
        "--similarity",
        action="store_true",
        help="print the cosine-similarity matrix instead of the vectors",
    )
    embed.add_argument("--model", default="text_embedding")
    embed.add_argument("--precision", type=int, default=4, help="decimals printed")
    return p


def _embed(args: argparse.Namespace) -> int:
    texts = args.texts or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not texts:
        print("error: no text given (pass texts as arguments or on stdin)", file=sys.stderr)
        return 2
    with EmbeddingClient(args.url, args.protocol, args.model, args.timeout) as client:
        vectors = client.embed(texts)
    np.set_printoptions(precision=args.precision, suppress=True, linewidth=120)
    if args.similarity:
        matrix = cosine_similarity_matrix(vectors)
        width = max(len(str(i)) for i in range(len(texts))) + 1
        for i, text in enumerate(texts):
            print(f"[{i}] {text}")
        print(" " * width + "".join(f"{f'[{j}]':>9}" for j in range(len(texts))))
        for i, row in enumerate(matrix):
            print(f"{f'[{i}]':<{width}}" + "".join(f"{v:9.{args.precision}f}" for v in row))
    else:
        for text, vector in zip(texts, vectors, strict=True):
            rounded = [round(float(x), args.precision) for x in vector]
            print(json.dumps({"text": text, "embedding": rounded}, ensure_ascii=False))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; exit 0 on success, 1 on a server/connection error (one line), 2 on usage."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "embed":
            return _embed(args)
    except (ClientError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
