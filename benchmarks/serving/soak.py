"""``make soak``: one server under mixed traffic for minutes; leaks and failures are the checks.

Usage: ``python -m benchmarks.serving.soak [--minutes 10] [--output build/soak]``

One server through the launcher (loopback, free ports, all three models) gets closed-loop
traffic from client threads at once: ``text_embedding`` (real mixed-length texts, 1-16 per
request, HTTP and gRPC), ``ctr_ranking`` (random users, 32 candidates) and ``ctr_session``
(sessions of 3-8 events that END, and every ``ABANDON_EVERY``-th one left open to expire).
For the run, ``ctr_session`` is reloaded with a short ``max_sequence_idle_microseconds``
(``--session-idle-s``) through the load API's config override, so the abandoned sessions
expire within the run; the repository's config is not touched.

Every answer is checked (embeddings: unit norm, and probe texts equal to their answer at the
start; rankings: a permutation of the candidates by descending score, and a probe user equal to
its answer at the start). Every ``--sample-s`` seconds the RSS (``/proc/<pid>/status``
``VmRSS``) of the server and of each Python-backend stub, the size of this server's
shared-memory regions in ``/dev/shm``, the sessions gauge (``tritonrepo_sessions_active``) and
the queued requests are sampled. Checks, each pass/fail with its figures:

* no failed or wrong request;
  (before the first sample, the largest requests of the run are sent once: the shared-memory
  regions grow to the largest tensors they carried and stay, :func:`high_water_requests`);
* every process's RSS grows by less than ``RSS_GROWTH_LIMIT`` over the last half of the run
  (start, middle and end reported), and no stub process was replaced;
* the shared-memory regions grow by less than ``RSS_GROWTH_LIMIT`` over the last half;
* the sessions gauge returns to 0 once every session has ended or expired (expired sessions are
  evicted by the next execution of their instance, so a few one-event sessions are sent after
  the idle time: ``sweep``).

Writes ``report.md`` and ``report.json`` to ``--output`` and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.harness import inputs
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import BUILD_DIR
from tritonrepo.server.launcher import ServerOptions, TritonServer, free_port
from tritonrepo.server.processes import metric_values
from tritonrepo.text import spec
from tritonrepo_client import RankingClient, RepositoryClient, SessionClient, TritonConnection

RSS_GROWTH_LIMIT = 0.05  # max growth over the last half of the run (RSS and shared memory)
ABANDON_EVERY = 5  # every 5th session is left open to expire
CANDIDATES = 32  # per ranking / session request
REQUEST_TIMEOUT_S = 60.0  # network timeout of every client call
SESSIONS_METRIC = "tritonrepo_sessions_active"
PROBE_TEXTS = ["A man is eating food.", "Soak tests find slow leaks.", "short"]
PROBE_HISTORY = [12, 7, 981, 4000, 5]
PROBE_CANDIDATES = list(range(100, 100 + CANDIDATES))


@dataclass
class Sample:
    """One sample: ``t_s`` seconds since the traffic started; RSS in bytes by process name
    (``tritonserver`` and each stub's instance name); ``shm_bytes`` the total size of this
    server's regions; ``sessions`` the gauge summed over instances; ``pending`` the requests
    queued in all models; ``done``/``failed`` requests so far."""

    t_s: float
    rss_bytes: dict[str, int]
    shm_bytes: int
    shm_regions: int
    sessions: float
    pending: float
    done: int
    failed: int


@dataclass
class Counters:
    """Requests answered correctly and failed (or answered wrongly), per workload, with up to
    ten error messages."""

    done: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ok(self, workload: str, count: int = 1) -> None:
        with self.lock:
            self.done[workload] = self.done.get(workload, 0) + count

    def fail(self, workload: str, error: str) -> None:
        with self.lock:
            self.failed[workload] = self.failed.get(workload, 0) + 1
            if len(self.errors) < 10:
                self.errors.append(f"{workload}: {error}")

    def totals(self) -> tuple[int, int]:
        with self.lock:
            return sum(self.done.values()), sum(self.failed.values())


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


class WrongAnswer(RuntimeError):
    """The server answered, but not correctly."""


# --- reading the server -----------------------------------------------------------------------
def rss_bytes(pid: int) -> int | None:
    """``VmRSS`` of ``pid`` in bytes (None if it has exited)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return int(match.group(1)) * 1024 if match else None


def metric(server: TritonServer, name: str) -> float:
    """Metric ``name`` summed over its label sets, from the server's metrics endpoint."""
    return sum(metric_values(server.options.metrics_url, name, REQUEST_TIMEOUT_S).values())


def processes(server: TritonServer) -> dict[str, int]:
    """``{name: pid}``: ``tritonserver`` and every stub by instance name."""
    assert server.process is not None
    found = {"tritonserver": server.process.pid}
    found.update({s.instance: s.pid for s in server.stub_processes()})
    return found


# --- traffic -----------------------------------------------------------------------------------
def embed_worker(
    server: TritonServer,
    protocol: str,
    seed: int,
    counters: Counters,
    reference: np.ndarray,
    texts: list[str],
    stop: threading.Event,
) -> None:
    """text_embedding requests of 1-16 real texts; every 10th one the probe texts."""
    rng = np.random.default_rng(seed)
    with TritonConnection(server.options.url(protocol), protocol, REQUEST_TIMEOUT_S) as conn:
        for i in itertools.count():
            if stop.is_set():
                return
            probe = i % 10 == 0
            batch = PROBE_TEXTS if probe else list(rng.choice(texts, size=int(rng.integers(1, 17))))
            array = np.array([[t.encode()] for t in batch], dtype=object)
            try:
                out = conn.infer(spec.ENSEMBLE, {"TEXT": array}, ["EMBEDDING"])["EMBEDDING"]
                norms = np.linalg.norm(out, axis=1)
                if out.shape != (len(batch), spec.HIDDEN_SIZE) or not np.allclose(norms, 1, 1e-3):
                    raise WrongAnswer(f"embeddings of shape {out.shape}, norms {norms[:3]}")
                if probe and not ((out * reference).sum(axis=1) >= 1 - 1e-5).all():
                    raise WrongAnswer("probe embeddings differ from the start of the run")
                counters.ok("text_embedding")
            except Exception as exc:  # counted and reported
                counters.fail("text_embedding", f"{type(exc).__name__}: {exc}")


def check_ranking(ids: np.ndarray, scores: np.ndarray, candidates: np.ndarray, k: int) -> None:
    """Raise :class:`WrongAnswer` unless ``ids`` are ``k`` distinct candidates by descending
    score in (0, 1)."""
    if len(ids) != k or len(set(ids.tolist())) != k or not set(ids.tolist()) <= set(candidates):
        raise WrongAnswer(f"ranked ids {ids[:5]}... are not {k} distinct candidates")
    if not (np.all(np.diff(scores) <= 0) and np.all((scores > 0) & (scores < 1))):
        raise WrongAnswer(f"scores not descending in (0, 1): {scores[:5]}")


def rank_worker(
    server: TritonServer,
    protocol: str,
    seed: int,
    counters: Counters,
    reference: np.ndarray,
    stop: threading.Event,
) -> None:
    """ctr_ranking requests of random users (top 10 of 32); every 10th one the probe user."""
    rng = np.random.default_rng(seed)
    url = server.options.url(protocol)
    with RankingClient(url, protocol, timeout_s=REQUEST_TIMEOUT_S) as client:
        for i in itertools.count():
            if stop.is_set():
                return
            probe = i % 10 == 0
            history = PROBE_HISTORY if probe else rng.integers(1, 10_000, int(rng.integers(0, 80)))
            candidates = np.array(PROBE_CANDIDATES) if probe else rng.integers(1, 10_000, 32)
            candidates = np.unique(candidates)
            try:
                k = len(candidates) if probe else min(10, len(candidates))
                got = client.rank(history, candidates, top_k=k)
                check_ranking(got.item_ids, got.scores, candidates, k)
                if probe and not np.allclose(got.scores, reference, atol=1e-6):
                    raise WrongAnswer("probe ranking differs from the start of the run")
                counters.ok("ctr_ranking")
            except Exception as exc:  # counted and reported
                counters.fail("ctr_ranking", f"{type(exc).__name__}: {exc}")


def session_worker(
    server: TritonServer,
    protocol: str,
    seed: int,
    counters: Counters,
    stop: threading.Event,
    abandoned: list[str],
) -> None:
    """Sessions of 3-8 events on ctr_session; every ``ABANDON_EVERY``-th is left open."""
    rng = np.random.default_rng(seed)
    url = server.options.url(protocol)
    with SessionClient(url, protocol, timeout_s=REQUEST_TIMEOUT_S) as client:
        for n in itertools.count():
            if stop.is_set():
                return
            correlation_id = f"soak-{seed}-{n}"
            keep_open = n % ABANDON_EVERY == ABANDON_EVERY - 1
            session = client.session(correlation_id)
            events = int(rng.integers(3, 9))
            for e in range(events):
                candidates = np.unique(rng.integers(1, 10_000, CANDIDATES))
                last = e == events - 1
                try:
                    got = session.send(
                        int(rng.integers(1, 10_000)), candidates, end=last and not keep_open
                    )
                    check_ranking(got.item_ids, got.scores, candidates, len(candidates))
                    counters.ok("ctr_session")
                except Exception as exc:  # counted and reported; the session is dropped
                    counters.fail("ctr_session", f"{type(exc).__name__}: {exc}")
                    keep_open = True  # may hold state; it expires like an abandoned one
                    break
            if keep_open:
                abandoned.append(correlation_id)


def sweep(server: TritonServer, protocol: str, deadline_s: float) -> tuple[bool, float, int]:
    """One-event sessions (START and END), 8 at a time, until the sessions gauge reads 0;
    expired sessions are evicted when their instance next executes.

    Returns:
        (reached 0, seconds taken, one-event sessions sent).
    """
    start, sent = time.monotonic(), 0
    url = server.options.url(protocol)
    with SessionClient(url, protocol, timeout_s=REQUEST_TIMEOUT_S) as client:
        while metric(server, SESSIONS_METRIC) > 0:
            if time.monotonic() - start > deadline_s:
                return False, time.monotonic() - start, sent

            def one(name: str) -> None:
                client.session(name).send(1, PROBE_CANDIDATES, end=True)

            names = [f"sweep-{sent + k}-{secrets.token_hex(3)}" for k in range(8)]
            threads = [threading.Thread(target=one, args=(n,)) for n in names]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(REQUEST_TIMEOUT_S)
            sent += len(threads)
            time.sleep(0.5)
    return True, time.monotonic() - start, sent


# --- the run -----------------------------------------------------------------------------------
def high_water_requests(server: TritonServer, texts: list[str]) -> None:
    """The largest requests of the run, once per protocol, before the first sample: 64 of the
    longest texts (one full encoder batch, 64 x 256 tokens), a ranking and a session event of
    512 candidates. The shared-memory regions (and the pages the server maps of them) grow to
    the largest tensors they carried and stay; sized first, the run measures leaks, not the
    high-water mark of random batches."""
    longest = sorted(texts, key=len)[-64:]
    array = np.array([[t.encode()] for t in longest], dtype=object)
    candidates = np.arange(1, ctr_spec.MAX_CANDIDATES + 1)
    for protocol in ("http", "grpc"):
        url = server.options.url(protocol)
        with TritonConnection(url, protocol, REQUEST_TIMEOUT_S) as conn:
            conn.infer(spec.ENSEMBLE, {"TEXT": array}, ["EMBEDDING"])
        with RankingClient(url, protocol, timeout_s=REQUEST_TIMEOUT_S) as client:
            client.rank(np.arange(1, 200), candidates, top_k=10)
        with SessionClient(url, protocol, timeout_s=REQUEST_TIMEOUT_S) as sessions:
            sessions.session(f"high-water-{protocol}").send(1, candidates, end=True)


def start_server(output: Path, session_idle_s: float) -> TritonServer:
    """The launcher's server on free loopback ports, ctr_session reloaded with a
    ``session_idle_s`` idle timeout (a config override, not written to the repository)."""
    options = ServerOptions(
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        log_file=output / "tritonserver.log",
        repository_key=secrets.token_urlsafe(16),
    )
    server = TritonServer(options).start()
    try:
        with RepositoryClient(options.http_url, "http", key=options.repository_key) as repo:
            config = copy.deepcopy(repo.config(ctr_spec.SESSION_MODEL))
            idle_us = int(session_idle_s * 1e6)
            config["sequence_batching"]["max_sequence_idle_microseconds"] = idle_us
            old = {s.pid for s in server.stub_processes() if s.model == ctr_spec.SESSION_MODEL}
            repo.load(ctr_spec.SESSION_MODEL, config)
        # The replaced ctr_session stubs exit (and unlink their regions) after the load returns;
        # the run's first sample must not count them.
        deadline = time.monotonic() + 60
        while old & {s.pid for s in server.stub_processes()} or len(
            server.shared_memory_regions()
        ) != len(server.stub_processes()):
            if time.monotonic() > deadline:
                raise RuntimeError("the replaced ctr_session stubs did not exit within 60 s")
            time.sleep(0.2)
    except BaseException:
        server.stop()
        raise
    return server


def growth(start: float, end: float) -> float:
    return (end - start) / start if start else 0.0


def evaluate(
    samples: list[Sample],
    counters: Counters,
    pids: tuple[dict, dict],
    swept: tuple[bool, float, int],
    server_alive: bool,
) -> list[Check]:
    """The checks of the module docstring from the samples."""
    first, last = samples[0], samples[-1]
    middle = next(s for s in samples if s.t_s >= last.t_s / 2)
    done, failed = counters.totals()
    per = ", ".join(
        f"{w} {counters.done.get(w, 0)} ok / {counters.failed.get(w, 0)} failed"
        for w in ("text_embedding", "ctr_ranking", "ctr_session")
    )
    example = f"; e.g. {counters.errors[0]}" if counters.errors else ""
    checks = [
        Check(
            "no failed request",
            failed == 0 and done > 0,
            f"{done} answered, {failed} failed ({per}){example}",
        ),
        Check("server alive", server_alive, "tritonserver still running at the end"),
    ]
    before, after = pids
    replaced = sorted(k for k in before if after.get(k) != before[k])
    checks.append(
        Check("no process replaced", not replaced, f"replaced or gone: {replaced or 'none'}")
    )
    worst, worst_name = -1.0, ""
    for name in first.rss_bytes:
        if name in middle.rss_bytes and name in last.rss_bytes:
            g = growth(middle.rss_bytes[name], last.rss_bytes[name])
            if g > worst:
                worst, worst_name = g, name
    checks.append(
        Check(
            "RSS stable over the last half",
            worst < RSS_GROWTH_LIMIT,
            f"largest growth {worst:+.1%} ({worst_name}); limit {RSS_GROWTH_LIMIT:.0%}",
        )
    )
    shm = growth(middle.shm_bytes, last.shm_bytes)
    checks.append(
        Check(
            "shared memory stable over the last half",
            shm < RSS_GROWTH_LIMIT and last.shm_regions == first.shm_regions,
            f"{middle.shm_bytes / 2**20:.1f} → {last.shm_bytes / 2**20:.1f} MiB ({shm:+.1%}) in "
            f"{last.shm_regions} regions (start {first.shm_bytes / 2**20:.1f} MiB, "
            f"{first.shm_regions} regions)",
        )
    )
    reached, seconds, sent = swept
    checks.append(
        Check(
            "sessions back to 0",
            reached,
            f"gauge {'0' if reached else 'not 0'} {seconds:.1f} s after the idle timeout "
            f"({sent} one-event sessions sent to trigger eviction); peak during the run "
            f"{max(s.sessions for s in samples):.0f}",
        )
    )
    return checks


def write_report(
    output: Path,
    args: argparse.Namespace,
    samples: list[Sample],
    checks: list[Check],
    abandoned: int,
) -> None:
    """``report.json`` (everything) and ``report.md`` (checks, RSS table, samples)."""
    first, last = samples[0], samples[-1]
    middle = next(s for s in samples if s.t_s >= last.t_s / 2)
    (output / "report.json").write_text(
        json.dumps(
            {
                "minutes": args.minutes,
                "clients": {
                    "text_embedding": args.embed_clients,
                    "ctr_ranking": args.rank_clients,
                    "ctr_session": args.session_clients,
                },
                "session_idle_s": args.session_idle_s,
                "abandoned_sessions": abandoned,
                "checks": [asdict(c) for c in checks],
                "samples": [asdict(s) for s in samples],
            },
            indent=1,
        )
    )
    mib = 2**20
    lines = [
        f"# Soak: {args.minutes:g} min of mixed traffic",
        "",
        f"Clients: {args.embed_clients} text_embedding, {args.rank_clients} ctr_ranking, "
        f"{args.session_clients} ctr_session (closed loop, HTTP and gRPC); "
        f"{abandoned} sessions left open to expire (idle timeout {args.session_idle_s:g} s).",
        "",
        "| check | result | figures |",
        "|---|---|---|",
        *[f"| {c.name} | {'PASS' if c.ok else 'FAIL'} | {c.detail} |" for c in checks],
        "",
        f"RSS per process (MiB) at start (t = {first.t_s:.0f} s), middle "
        f"(t = {middle.t_s:.0f} s) and end (t = {last.t_s:.0f} s); growth over the last half:",
        "",
        "| process | start | middle | end | growth |",
        "|---|---|---|---|---|",
    ]
    for name, start in first.rss_bytes.items():
        mid, end = middle.rss_bytes.get(name, 0), last.rss_bytes.get(name, 0)
        lines.append(
            f"| {name} | {start / mib:.1f} | {mid / mib:.1f} | {end / mib:.1f} | "
            f"{growth(mid, end):+.1%} |"
        )
    lines += [
        "",
        "Samples: t (s), shared memory (MiB), sessions gauge, queued requests, answered, failed:",
        "",
        "| t | shm | sessions | queued | answered | failed |",
        "|---|---|---|---|---|---|",
        *[
            f"| {s.t_s:.0f} | {s.shm_bytes / mib:.1f} | {s.sessions:.0f} | {s.pending:.0f} | "
            f"{s.done} | {s.failed} |"
            for s in samples
        ],
    ]
    (output / "report.md").write_text("\n".join(lines) + "\n")


def run(args: argparse.Namespace) -> int:
    """Start the server, drive the traffic, sample, check, report; returns the exit code."""
    from rich.console import Console

    console = Console(stderr=True)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    console.print(f"starting tritonserver (log: {output / 'tritonserver.log'})")
    server = start_server(output, args.session_idle_s)
    try:
        texts = inputs.texts(200)
        with TritonConnection(server.options.http_url, "http", REQUEST_TIMEOUT_S) as conn:
            probe = np.array([[t.encode()] for t in PROBE_TEXTS], dtype=object)
            embed_ref = conn.infer(spec.ENSEMBLE, {"TEXT": probe}, ["EMBEDDING"])["EMBEDDING"]
        with RankingClient(server.options.http_url, timeout_s=REQUEST_TIMEOUT_S) as client:
            rank_ref = client.rank(PROBE_HISTORY, PROBE_CANDIDATES, len(PROBE_CANDIDATES)).scores
        console.log("high-water-mark requests (64 long texts, 512 candidates)")
        high_water_requests(server, texts)
        counters, stop, abandoned = Counters(), threading.Event(), []
        protocols = itertools.cycle(("http", "grpc"))
        targets: list[tuple[Callable, tuple]] = []
        for i in range(args.embed_clients):
            args_ = (server, next(protocols), i, counters, embed_ref, texts, stop)
            targets.append((embed_worker, args_))
        for i in range(args.rank_clients):
            args_ = (server, next(protocols), 100 + i, counters, rank_ref, stop)
            targets.append((rank_worker, args_))
        for i in range(args.session_clients):
            args_ = (server, next(protocols), 200 + i, counters, stop, abandoned)
            targets.append((session_worker, args_))
        pids_before = processes(server)
        threads = [threading.Thread(target=t, args=a, daemon=True) for t, a in targets]
        start = time.monotonic()
        duration_s = args.minutes * 60
        samples: list[Sample] = []

        def take_sample() -> Sample:
            rss = {}
            for name, pid in processes(server).items():
                value = rss_bytes(pid)
                if value is not None:
                    rss[name] = value
            regions = server.shared_memory_regions()
            done, failed = counters.totals()
            return Sample(
                t_s=round(time.monotonic() - start, 1),
                rss_bytes=rss,
                shm_bytes=sum(p.stat().st_size for p in regions if p.exists()),
                shm_regions=len(regions),
                sessions=metric(server, SESSIONS_METRIC),
                pending=metric(server, "nv_inference_pending_request_count"),
                done=done,
                failed=failed,
            )

        for thread in threads:
            thread.start()
        console.log(f"traffic started: {len(threads)} clients for {duration_s:g} s")
        with console.status("soak") as status:
            while True:
                samples.append(take_sample())
                s = samples[-1]
                status.update(
                    f"soak {s.t_s:.0f}/{duration_s:.0f} s: {s.done} answered, {s.failed} "
                    f"failed, {s.sessions:.0f} sessions, {s.pending:.0f} queued, shm "
                    f"{s.shm_bytes / 2**20:.1f} MiB"
                )
                if time.monotonic() - start >= duration_s:
                    break
                time.sleep(min(args.sample_s, max(0.0, start + duration_s - time.monotonic())))
            stop.set()
            status.update("soak: waiting for the clients' last requests")
            for thread in threads:
                thread.join(REQUEST_TIMEOUT_S + 5)
            samples.append(take_sample())
            status.update(f"soak: waiting {args.session_idle_s + 2:g} s for sessions to expire")
            time.sleep(args.session_idle_s + 2)  # Triton's idle timeout + the store's 1 s grace
            swept = sweep(server, "grpc", deadline_s=60.0)
        console.log("traffic and sweep done; final sample")
        samples.append(take_sample())
        pids_after = processes(server)
        alive = server.process is not None and server.process.poll() is None
    finally:
        server.stop()
    checks = evaluate(samples, counters, (pids_before, pids_after), swept, alive)
    write_report(output, args, samples, checks, len(abandoned))
    for check in checks:
        mark = "[green]PASS[/green]" if check.ok else "[red]FAIL[/red]"
        console.print(f"{mark} {check.name}: {check.detail}")
    console.print(f"report: {output / 'report.md'}")
    return 0 if all(c.ok for c in checks) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serving.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="traffic duration (min)")
    parser.add_argument("--embed-clients", type=int, default=4)
    parser.add_argument("--rank-clients", type=int, default=2)
    parser.add_argument("--session-clients", type=int, default=2)
    parser.add_argument("--sample-s", type=float, default=5.0, help="sampling period (s)")
    parser.add_argument(
        "--session-idle-s", type=float, default=5.0, help="ctr_session idle timeout for the run (s)"
    )
    parser.add_argument("--output", default=str(BUILD_DIR / "soak"))
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be > 0")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
