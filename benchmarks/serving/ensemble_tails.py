"""``make bench-tails``: the latency tail of the shipped ensembles on the CPU configs, as
``make serve`` runs them, at concurrency 1, 4 and 16.

Usage: ``python -m benchmarks.serving.ensemble_tails [--model NAME ...] [--seconds 15]``

For each model that ``make serve`` serves as an ensemble in the CPU set (read from the configs:
:func:`tritonrepo_format.roles.served_models`, ``platform: "ensemble"``), one
server with that model alone, HTTP through the guard as ``tritonrepo-serve`` serves it, and
``wrk`` (:mod:`benchmarks.harness.wrk`) sending the model's own health-probe request (its config's
``tritonrepo_probe``: a real request of the pipeline) from 1, 4 and 16 connections for
``--seconds`` each. It prints requests/s, p50, p99 and the slowest request per level, and the
requests slower than :data:`STALL_MS` that the batcher's 500 ms wait would show as
(docs/known_issues.md): a core model with a queue policy met it at concurrency 4 (``ctr_ranking``:
p99 512 ms, max 664 ms, against a 36 ms request).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tritonclient.utils import np_to_triton_dtype

from benchmarks.harness import wrk
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY
from tritonrepo_client.control.probe_declaration import declared_probe
from tritonrepo_format.configs import read_config
from tritonrepo_format.roles import served_models

LEVELS = (1, 4, 16)
STALL_MS = 450.0  # slower than this is the batcher's 500 ms wait, not work (module docstring)
CONFIG_SET = "cpu"


def ensembles() -> list[str]:
    """The models ``make serve`` serves that are ensembles in the CPU set."""
    return [
        m
        for m in served_models(MODEL_REPOSITORY, CONFIG_SET)
        if read_config(MODEL_REPOSITORY, m, CONFIG_SET).platform == "ensemble"
    ]


def probe_body(model: str) -> tuple[bytes, dict[str, str]]:
    """The model's declared health-probe request (:func:`declared_probe`) as a KServe v2 HTTP
    body: numbers as JSON, BYTES in the binary extension (as tritonclient sends them), the
    declared outputs asked for as JSON; and its headers."""
    import tritonclient.http as httpclient
    from google.protobuf import json_format

    config = read_config(MODEL_REPOSITORY, model, CONFIG_SET)
    probe = declared_probe(json_format.MessageToDict(config, preserving_proto_field_name=True),
                           model)  # fmt: skip
    assert probe is not None, f"{model} declares no probe"
    inputs = []
    for name, value in probe.inputs.items():
        binary = value.dtype == object
        tensor = httpclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        tensor.set_data_from_numpy(value, binary_data=binary)
        inputs.append(tensor)
    outputs = [httpclient.InferRequestedOutput(o.name, binary_data=False) for o in probe.outputs]
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs)
    if json_size is None:
        return (body.encode() if isinstance(body, str) else body), {
            "Content-Type": "application/json"
        }
    return body, {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(json_size),
    }


def measure(model: str, seconds: float, priorities: bool = False) -> list[wrk.Measurement]:
    """One measurement per level of :data:`LEVELS` on a fresh server serving ``model`` alone;
    with ``priorities``, its core models reloaded with the two priority levels a description's
    ``priority_levels = 2`` gives them (the queue policy that makes the batcher wait).

    Raises:
        RuntimeError: the server did not start, or answers were errors.
    """
    from contextlib import ExitStack

    from benchmarks.serving.priority import priority_levels
    from tests.conftest import server_options
    from tritonrepo.server.launcher import TritonServer
    from tritonrepo.server.queue_policy import core_models
    from tritonrepo_client import RepositoryClient
    from tritonrepo_format.configs import ensemble_steps

    options = server_options(f"tails-{model}", models=(model,), http_guard=True,
                             log_file=BUILD_DIR / "bench" / f"tails-{model}.log")  # fmt: skip
    body = probe_body(model)
    cores = [
        step
        for step in ensemble_steps(read_config(MODEL_REPOSITORY, model, CONFIG_SET))
        if step in core_models()
    ]
    out = []
    with TritonServer(options), ExitStack() as stack:
        if priorities:
            repo = stack.enter_context(
                RepositoryClient(options.http_url, "http", key=options.repository_key)
            )
            for core in cores:
                stack.enter_context(priority_levels(repo, core, CONFIG_SET))
        for level in LEVELS:
            m = wrk.run(options.http_port, f"/v2/models/{model}/infer", [body], level, seconds)
            if m.errors:
                raise RuntimeError(f"{model}: {m.errors} answers at c={level} were errors")
            out.append(m)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print one line per model and level; exit 1 when a model cannot be measured."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serving.ensemble_tails",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--model", action="append", help="repeatable (default: every ensemble)")
    parser.add_argument("--seconds", type=float, default=15.0, help="per level (15)")
    parser.add_argument(
        "--priorities",
        action="store_true",
        help="reload each ensemble's core models with two priority levels first (the queue "
        "policy priority_levels = 2 writes): the tail a queue policy gives",
    )
    args = parser.parse_args(argv)
    print("| model | concurrency | requests/s | p50 ms | p99 ms | max ms | over "
          f"{STALL_MS:.0f} ms |\n|---|---|---|---|---|---|---|")  # fmt: skip
    for model in args.model or ensembles():
        try:
            measured = measure(model, args.seconds, args.priorities)
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        for m in measured:
            stalled = "yes" if m.max_ms > STALL_MS else "no"
            print(f"| {model} | {m.concurrency} | {m.throughput:.1f} | {m.p50_ms:.1f} | "
                  f"{m.p99_ms:.1f} | {m.max_ms:.1f} | {stalled} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
