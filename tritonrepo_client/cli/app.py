"""tritonrepo-client: command line for the models of this repository.

Examples::

    tritonrepo-client embed "A man is eating food." "A man eats."
    tritonrepo-client embed --input texts.txt --output vectors.npy --concurrency 8
    tritonrepo-client --protocol grpc embed --similarity "cat" "kitten" "car"
    tritonrepo-client rank --history 12 7 981 --candidates 5 66 981 4000 --top-k 2
    tritonrepo-client session --correlation-id user-42 events.jsonl   # or - for stdin
    tritonrepo-client classify cat.jpg cup.png --top-k 3   # ImageNet top-K table
    tritonrepo-client health                      # exit 1 unless every served model answers
    tritonrepo-client health --model my_ensemble  # probed if its config declares a probe
    tritonrepo-client heal                        # reload steps whose stubs died; exit 1 if any
    tritonrepo-client heal --watch --interval 10  # the same every 10 s (a sidecar)
    tritonrepo-client heal --watch --metrics-port 8003  # ... with Prometheus metrics
    tritonrepo-client models list
    tritonrepo-client rollout text_embedding_encoder --version 2
    tritonrepo-client rollback text_embedding_encoder
    tritonrepo-client configs use cpu             # CPU fallback of a running server, no downtime
    tritonrepo-client configs use default         # ... and back to config.pbtxt (TensorRT)
    tritonrepo-client --priority bulk embed --input texts.txt --output vectors.npy
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from tritonrepo_client.bulk import embed_file
from tritonrepo_client.classify import ClassificationClient, print_classifications
from tritonrepo_client.cli import canary
from tritonrepo_client.cli.control import (
    add_local_checks_arguments,
    configs_command,
    heal_command,
    local_repository,
    models_command,
    rollout_command,
    tls_from_args,
)
from tritonrepo_client.cli.infer import add_infer_parser, infer_command
from tritonrepo_client.cli.serving import health_command, session_command
from tritonrepo_client.connection import DEFAULT_URLS, ClientError
from tritonrepo_client.embedding import EmbeddingClient, cosine_similarity_matrix
from tritonrepo_client.ranking import RankingClient
from tritonrepo_client.scheduling import BULK, parse_priority


def _priority_argument(text: str) -> int:
    try:
        return parse_priority(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tritonrepo-client", description=__doc__.splitlines()[0])
    p.add_argument(
        "--url", help="server host:port (default 127.0.0.1:8000 for http, 127.0.0.1:8001 for grpc)"
    )
    p.add_argument("--protocol", choices=sorted(DEFAULT_URLS), default="http")
    p.add_argument(
        "--timeout",
        type=float,
        help="deadline of each call, seconds (default 60; 300 for models/rollout/rollback, "
        "whose loads are abandoned with the model's state when it passes)",
    )
    p.add_argument(
        "--priority",
        type=_priority_argument,
        help="priority level of inference requests: realtime (1, the default) or bulk (2; the "
        "default of embed --input), or 0..2 (0 = the model's default)",
    )
    p.add_argument(
        "--timeout-us",
        type=int,
        help="Triton's queue timeout of each inference request, µs: still queued after it, the "
        "request is rejected (default: the --timeout deadline)",
    )
    p.add_argument(
        "--repository-key-file",
        type=Path,
        help="file holding the model-repository API key (default: $TRITONREPO_REPOSITORY_KEY, "
        "$TRITONREPO_REPOSITORY_KEY_FILE, or build/repository.key)",
    )
    tls = p.add_argument_group("gRPC over TLS (a server started with --grpc-tls-cert)")
    tls.add_argument("--grpc-root-cert", type=Path, help="PEM of the CA that signed the server")
    tls.add_argument("--grpc-client-cert", type=Path, help="PEM client certificate (mutual TLS)")
    tls.add_argument("--grpc-client-key", type=Path, help="PEM client private key (mutual TLS)")
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
    bulk = embed.add_argument_group("bulk job (a file of any length, bounded memory)")
    bulk.add_argument("--input", type=Path, help="text file, one text per line")
    bulk.add_argument("--output", type=Path, help="with --input: .npy file, FP32 [lines, 384]")
    bulk.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    bulk.add_argument("--batch-size", type=int, help="texts per request (default: max_batch_size)")
    bulk.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="give a line the server refuses a NaN row and go on (default: stop, naming it)",
    )
    bulk.add_argument("--no-progress", action="store_true", help="no progress bar")

    rank = sub.add_parser("rank", help="top-K candidates for a user from ctr_ranking (JSON)")
    rank.add_argument("--history", type=int, nargs="*", default=[], help="item ids, newest last")
    rank.add_argument("--candidates", type=int, nargs="+", required=True, help="1..512 item ids")
    rank.add_argument("--top-k", type=int, help="how many to return (server default 10)")
    rank.add_argument("--model", default="ctr_ranking")

    session = sub.add_parser(
        "session",
        help='replay a session on ctr_session: JSON lines {"item_id": N, "candidates": [...]}'
        " from a file or stdin; prints one ranking per event",
    )
    session.add_argument("events", nargs="?", default="-", help="JSON-lines file (default: stdin)")
    session.add_argument(
        "--correlation-id",
        required=True,
        help="session id: digits are sent as a numeric correlation ID, anything else as a string",
    )
    session.add_argument("--model", default="ctr_session")

    classify = sub.add_parser(
        "classify", help="ImageNet top-K of image files (JPEG/PNG/WebP) from image_classification"
    )
    classify.add_argument("images", nargs="+", type=Path, help="image files")
    classify.add_argument("--top-k", type=int, default=5, help="classes per image (default 5)")
    classify.add_argument("--model", default="image_classification")
    classify.add_argument("--json", action="store_true", help="one JSON line per image")
    classify.add_argument(
        "--precision", type=int, default=4, help="decimals of the probabilities printed"
    )
    classify.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    add_infer_parser(sub)

    health = sub.add_parser(
        "health",
        help="liveness/readiness with a real inference per served model; WARN lines for "
        "other models that failed to load or are still loading; exit 1 if unhealthy",
    )
    health.add_argument(
        "--model",
        dest="models",
        action="append",
        help="served model to check (repeatable; default: every loaded model whose config "
        "declares a probe, parameter tritonrepo_probe: docs/operations/health.md); one without "
        "a probe is reported 'ready, not probed'",
    )
    health.add_argument("--live", action="store_true", help="liveness only")

    heal = sub.add_parser(
        "heal",
        help="probe every model, reload the steps whose Python stub died (needs the repository "
        "key); exit 1 unless all serve afterwards",
    )
    heal.add_argument(
        "--model",
        dest="models",
        action="append",
        help="served model to probe (repeatable; default: every loaded model whose config "
        "declares a probe)",
    )
    heal.add_argument("--watch", action="store_true", help="heal every --interval until stopped")
    heal.add_argument(
        "--interval", type=float, default=10.0, help="with --watch: seconds between passes"
    )
    heal.add_argument(
        "--backoff", type=float, default=30.0, help="seconds before retrying a failed reload"
    )
    heal.add_argument(
        "--metrics-port",
        type=int,
        help="with --watch: serve Prometheus metrics (tritonrepo_model_ready, "
        "tritonrepo_step_restarts_total) on this port",
    )
    heal.add_argument(
        "--metrics-address",
        default="127.0.0.1",
        help="address of --metrics-port (0.0.0.0 in a container that Prometheus scrapes)",
    )

    models = sub.add_parser("models", help="explicit model control (needs the repository key)")
    msub = models.add_subparsers(dest="action", required=True)
    msub.add_parser("list", help="repository index: models, versions, states")
    load = msub.add_parser("load", help="load or reload a model")
    load.add_argument("model")
    load.add_argument("--config", type=Path, help="JSON ModelConfig file to use as override")
    add_local_checks_arguments(load, load=True)
    unload = msub.add_parser("unload", help="unload a model")
    unload.add_argument("model")
    unload.add_argument(
        "--dependents",
        action="store_true",
        help="also unload the models it uses (ensemble steps, models it calls through BLS) that no "
        "other loaded model uses",
    )
    ready = msub.add_parser("ready", help="exit 0 if the model (version) is READY, else 1")
    ready.add_argument("model")
    ready.add_argument("--version", default="")

    configs = sub.add_parser(
        "configs",
        help="switch the running server to another config set (CPU fallback) through the load "
        "API, model by model, with probes (needs the repository key)",
    )
    csub = configs.add_subparsers(dest="action", required=True)
    use = csub.add_parser("use", help="reload every loaded model with its config in SET")
    use.add_argument("config_set", metavar="SET", help="cpu, torch_gpu, ... or default")
    use.add_argument("--force", action="store_true", help="switch even if unhealthy now")
    show = csub.add_parser("show", help="the config set each loaded model serves")
    for cmd in (use, show):
        cmd.add_argument(
            "--repository",
            type=Path,
            default=local_repository(),
            help="the model repository the configs are read from (default: "
            "$TRITONREPO_MODEL_REPOSITORY, else this checkout's)",
        )
        cmd.add_argument(
            "--model",
            dest="models",
            action="append",
            help="served model to probe (repeatable; default: every loaded model whose "
            "config declares a probe)",
        )

    for name, text in (
        ("rollout", "serve another version with a canary check, without downtime"),
        ("rollback", "return to the version the last rollout replaced"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("model")
        if name == "rollout":
            cmd.add_argument("--version", type=int, required=True)
        cmd.add_argument(
            "--from",
            dest="source_dir",
            type=Path,
            help="local model folder with the version folders, uploaded through the load API "
            "(default: the versions are already in the server's repository)",
        )
        cmd.add_argument(
            "--min-cosine",
            type=float,
            help="canary for text-embedding encoders: min cosine between versions",
        )
        cmd.add_argument(
            "--probe-file",
            type=Path,
            help="canary probe: .npz of input arrays (with batch dim); outputs must be allclose",
        )
        cmd.add_argument("--output", action="append", help="with --probe-file: output to compare")
        cmd.add_argument("--atol", type=float, default=1e-3)
        cmd.add_argument("--rtol", type=float, default=1e-3)
        cmd.add_argument("--no-canary", action="store_true", help="skip the comparison")
        cmd.add_argument("--drain-timeout", type=float, default=120.0, help="seconds")
        add_local_checks_arguments(cmd, load=False)
    canary.add_parser(sub)
    return p


def _scheduling(args: argparse.Namespace) -> dict:
    """The clients' ``priority`` / ``timeout_us`` from ``--priority`` / ``--timeout-us``."""
    return {"priority": args.priority or 0, "timeout_us": args.timeout_us}


def _embed_file(args: argparse.Namespace) -> int:
    if args.output is None or args.texts:
        print("error: --input needs --output and no texts on the command line", file=sys.stderr)
        return 2
    with EmbeddingClient(
        args.url,
        args.protocol,
        args.model,
        args.timeout,
        tls_from_args(args),
        priority=BULK if args.priority is None else args.priority,
        timeout_us=args.timeout_us,
    ) as client:
        report = embed_file(
            client,
            args.input,
            args.output,
            concurrency=args.concurrency,
            batch_size=args.batch_size,
            skip_bad_lines=args.skip_bad_lines,
            progress=not args.no_progress,
        )
    for line, reason in report.bad_lines:
        print(f"skipped {args.input}, line {line}: {reason}", file=sys.stderr)
    print(
        f"{report.lines} lines -> {args.output} in {report.seconds:.1f} s "
        f"({report.texts_per_second:,.0f} texts/s, {len(report.bad_lines)} skipped)"
    )
    return 0


def _embed(args: argparse.Namespace) -> int:
    if args.input is not None:
        return _embed_file(args)
    texts = args.texts or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not texts:
        print("error: no text given (pass texts as arguments or on stdin)", file=sys.stderr)
        return 2
    with EmbeddingClient(
        args.url, args.protocol, args.model, args.timeout, tls_from_args(args), **_scheduling(args)
    ) as client:
        vectors = client.embed(texts)
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


def _classify(args: argparse.Namespace) -> int:
    if args.top_k < 1:
        print(f"error: --top-k must be >= 1, got {args.top_k}", file=sys.stderr)
        return 2
    if args.precision < 0:
        print(f"error: --precision must be >= 0, got {args.precision}", file=sys.stderr)
        return 2
    with ClassificationClient(
        args.url, args.protocol, args.model, args.timeout, tls_from_args(args), **_scheduling(args)
    ) as client:
        results = client.classify_each(args.images, args.top_k, args.concurrency)
    return print_classifications(args.images, results, args.json, args.precision)


def _rank(args: argparse.Namespace) -> int:
    with RankingClient(
        args.url, args.protocol, args.model, args.timeout, tls_from_args(args), **_scheduling(args)
    ) as client:
        ranking = client.rank(args.history, args.candidates, args.top_k)
    print(json.dumps(ranking.as_dict()))
    return 0


COMMANDS = {
    "embed": _embed,
    "rank": _rank,
    "session": session_command,
    "classify": _classify,
    "infer": infer_command,
    "health": health_command,
    "heal": heal_command,
    "configs": configs_command,
    "models": models_command,
    "rollout": rollout_command,
    "rollback": rollout_command,
    "canary": canary.canary_command,
}


# Commands that load or unload models: longer default deadline.
CONTROL_COMMANDS = ("models", "rollout", "rollback", "heal", "configs", "canary")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; exit 0 on success, 1 on a server, connection or check failure (one line),
    2 on a usage error."""
    args = _parser().parse_args(argv)
    if args.timeout is None:
        args.timeout = 300.0 if args.command in CONTROL_COMMANDS else 60.0
    if args.timeout <= 0:
        print(f"error: --timeout must be > 0 seconds, got {args.timeout:g}", file=sys.stderr)
        return 2
    if args.timeout_us is not None and args.timeout_us < 1:
        print(f"error: --timeout-us must be >= 1 µs, got {args.timeout_us}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[args.command](args)
    except (ClientError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
