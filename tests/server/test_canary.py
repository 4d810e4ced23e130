"""The traffic-weighted canary (tritonrepo_client.control.canary) on a real server behind its
HTTP guard, under load from client threads that count every failed request:

* a good version (text_embedding_encoder version 2, bf16 weights: cosine 0.99997 to version 1)
  takes 10 % then 50 % of the live requests (measured from Triton's request counters and the
  guard's count of shadow copies), agrees with version 1 on the shadow copies, and is
  promoted: the encoder serves version 2 alone, the canary ensemble and the route are gone;
* a broken version (version 9, made here from version 1: its embeddings pushed off by a constant
  vector, and four 512 x 512 matrix products added to every run) is rolled back by itself on
  the shadow comparison's agreement (or its latency), ``tritonrepo-client canary`` exits 3, and
  the encoder serves version 1 alone again;
* a shadow window alone (the command line's ``--steps ''``) reports the comparison and changes
  nothing;
* a canary stopped by SIGTERM in its first step is rolled back before the command exits; one
  killed outright leaves its state, which a new canary refuses and ``canary --abort`` undoes.

No request of the load fails in either. The server is a throwaway one (a reload of an ensemble
under load may hit Triton 2.51's known crash, docs/known_issues.md), on a model repository of
links to the checkout's models, with a copy of the encoder's folder that has version 9 too.
Every wait has a deadline.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import helper, numpy_helper

from tests.conftest import require_artifacts, server_options
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.http_guard import guard_available
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo_client import ClientError, RepositoryClient, RouteTable, TritonConnection
from tritonrepo_client.cli.app import main as cli
from tritonrepo_client.control.canary import CanaryPolicy, canary_rollout
from tritonrepo_client.control.canary_forms import CANARY_SUFFIX, step_of
from tritonrepo_client.control.canary_policy import (
    GROSS_P99_REQUESTS,
    P99_REQUESTS,
    supported_quantile,
)
from tritonrepo_client.control.guard_routes import GuardRoutes, Route

pytestmark = pytest.mark.server

BROKEN = 9
# Short windows for a test; the latency bound is loose (4x) because two encoder versions' stubs
# share two cores with the load here. Latency is judged from 20 canary requests on (the p50
# below 1,000), so a few requests held up by Triton's batcher waits do not decide.
POLICY = CanaryPolicy(
    steps=(10.0, 50.0), shadow=20.0, window_s=8.0, interval_s=1.0, min_requests=20,
    max_p99_ratio=4.0,
)  # fmt: skip
TEXTS = [f"request number {i} about a cat on a mat" for i in range(50)]


def broken_encoder(source: Path, target: Path) -> None:
    """Version 1's graph with its output moved by a constant vector (wrong answers: cosine to
    version 1 about 0.1) and four 512 x 512 matrix products on every run that depend on the
    input (slow; multiplied by 0 into the output, so only the constant shifts it)."""
    model = onnx.load(str(source))
    graph = model.graph
    out = graph.output[0].name
    for node in graph.node:
        node.output[:] = [f"{out}_raw" if o == out else o for o in node.output]
    rng = np.random.default_rng(0)
    shift = rng.normal(size=spec.HIDDEN_SIZE).astype(np.float32)
    square = rng.normal(size=(512, 512)).astype(np.float32) / 512
    graph.initializer.extend([
        numpy_helper.from_array(shift, "broken_shift"),
        numpy_helper.from_array(square, "broken_square"),
        numpy_helper.from_array(np.zeros(1, np.float32), "broken_zero"),
    ])  # fmt: skip
    nodes = [
        helper.make_node("ReduceMean", [f"{out}_raw"], ["broken_mean"], keepdims=0),
        helper.make_node("Mul", ["broken_square", "broken_mean"], ["broken_m0"]),
    ]
    for i in range(4):
        nodes.append(
            helper.make_node("MatMul", [f"broken_m{i}", "broken_square"], [f"broken_m{i + 1}"])
        )
    nodes += [
        helper.make_node("ReduceSum", ["broken_m4"], ["broken_sum"], keepdims=0),
        helper.make_node("Mul", ["broken_sum", "broken_zero"], ["broken_nothing"]),
        helper.make_node("Add", [f"{out}_raw", "broken_shift"], ["broken_shifted"]),
        helper.make_node("Add", ["broken_shifted", "broken_nothing"], [out]),
    ]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    """Links to every model folder of the checkout; the encoder's folder a copy of links with
    version 9 added."""
    require_artifacts()
    root = tmp_path_factory.mktemp("canary") / "model_repository"
    root.mkdir()
    for folder in MODEL_REPOSITORY.iterdir():
        if folder.is_dir() and folder.name != spec.ENCODER_MODEL:
            (root / folder.name).symlink_to(folder)
    encoder = root / spec.ENCODER_MODEL
    encoder.mkdir()
    for entry in (MODEL_REPOSITORY / spec.ENCODER_MODEL).iterdir():
        (encoder / entry.name).symlink_to(entry)
    broken_encoder(MODEL_REPOSITORY / spec.ENCODER_MODEL / "1" / "model.onnx",
                   encoder / str(BROKEN) / "model.onnx")  # fmt: skip
    return root


@pytest.fixture
def server(repository: Path) -> Iterator[TritonServer]:
    """A server of the test's own behind the HTTP guard, serving text_embedding."""
    reason = guard_available()
    if reason:
        pytest.fail(reason)
    options = server_options("test_canary", models=(spec.ENSEMBLE,), http_guard=True,
                             model_repository=repository)  # fmt: skip
    with TritonServer(options) as s:
        yield s


class Load:
    """Three client threads embedding one text per request through the guard until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.counts: Counter = Counter()
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(3)]

    def _run(self, offset: int) -> None:
        with TritonConnection(self.url, "http", timeout_s=60.0) as conn:
            n = offset
            while not self.stop_event.is_set():
                text = TEXTS[n % len(TEXTS)].encode()
                try:
                    conn.infer(spec.ENSEMBLE, {"TEXT": np.array([[text]], dtype=object)},
                               ["EMBEDDING"], retry=False)  # fmt: skip
                    self.counts["ok"] += 1
                except Exception as exc:
                    self.counts[f"failed: {exc}"] += 1
                n += 3

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(60.0)


class LiveShares:
    """The canary's share of the live requests in each step's window, measured from outside the
    canary's code: Triton's request counters of the pipeline and of ``<pipeline>__canary``
    (inference statistics) and the guard's count of shadow copies (each copy is one more
    request to both ensembles, not a live one), read when the canary says a step began (``step
    at W %``: the route has its weight) and when its window ended (``window at W %``). Used as
    the canary's ``say``; the lines are kept."""

    def __init__(self, server: TritonServer, routes: GuardRoutes) -> None:
        self.stats = httpclient.InferenceServerClient(server.triton_http_url)
        self.routes = routes
        self.lines: list[str] = []
        self.began: tuple[float, dict[str, float]] | None = None
        self.shares: dict[float, tuple[float, float]] = {}  # weight: (live share, live requests)

    def counts(self) -> dict[str, float]:
        """Requests each ensemble has answered or failed (Triton's inference statistics)."""
        found = {}
        for model in (spec.ENSEMBLE, spec.ENSEMBLE + CANARY_SUFFIX):
            stats = self.stats.get_inference_statistics(model)["model_stats"]
            found[model] = sum(int(s["inference_stats"][k]["count"])
                               for s in stats for k in ("success", "fail"))  # fmt: skip
        return found

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        step = re.search(r"step at ([\d.]+) %", line)
        window = re.search(r"window at ([\d.]+) %", line)
        if step:
            self.began = (time.time(), self.counts())
        elif window and float(window.group(1)) > 0 and self.began is not None:
            since, before = self.began
            copies = self.routes.shadow(spec.ENSEMBLE, since)["compared"]
            after = self.counts()
            grew = {m: after.get(m, 0.0) - before.get(m, 0.0) for m in after}
            canary = grew.get(spec.ENSEMBLE + CANARY_SUFFIX, 0.0) - copies
            live = canary + grew.get(spec.ENSEMBLE, 0.0) - copies
            self.shares[float(window.group(1))] = (canary / live if live else 0.0, live)
            self.began = None


def assert_share_near(weight: float, share: float, live: float) -> None:
    """``share`` of ``live`` requests is a draw of ``weight`` percent: within 4 standard
    deviations of a binomial draw, plus 6 requests either way (those in flight when a count
    was read). The bound must be narrower than the distance from ``weight`` to no live request
    at all and to the policy's other steps (else the window had too few requests to tell them
    apart): ~300 live requests at 10 %; a window on two quiet cores has ~1,000."""
    p = weight / 100
    bound = 4 * math.sqrt(p * (1 - p) / live) + 6 / live
    nearest = min(abs(p - other / 100) for other in (0.0, *POLICY.steps) if other != weight)
    assert bound < nearest, f"{live:.0f} live requests at {weight:g} %: too few to tell a share"
    assert abs(share - p) <= bound, (
        f"the canary had {share:.1%} of {live:.0f} live requests at the {weight:g} % step "
        f"(allowed {p:.0%} ± {bound:.1%})"
    )


LATENCY_REASON = re.compile(
    r"the canary's (p50|p90|p95|p99) is [\d.]+ ms over (\d+) (shadow copies|requests), over "
)


def assert_rollback_reason(reason: str) -> None:
    """The broken version is rolled back for its answers (a measure of EMBEDDING) or its
    latency; a latency reason names the quantile the rule uses for its count: over shadow
    copies the highest they support (``supported_quantile``), over the canary's own requests
    the p99 from ``P99_REQUESTS`` on and the p50 below; a gross p99 may roll back at any count
    from ``GROSS_P99_REQUESTS`` on."""
    if reason.startswith("the canary's answers differ: EMBEDDING "):
        return
    latency = LATENCY_REASON.match(reason)
    assert latency, f"not a rollback for the answers or the latency: {reason}"
    quantile, count, basis = latency.group(1), int(latency.group(2)), latency.group(3)
    if quantile == "p99" and count >= GROSS_P99_REQUESTS:
        return
    if basis == "shadow copies":
        assert quantile == supported_quantile(count), reason
    else:
        assert quantile == ("p99" if count >= P99_REQUESTS else "p50"), reason


def ready_models(repo: RepositoryClient) -> set[str]:
    """The READY models of the repository index, and the canary ensemble when it is ready (a
    model loaded through the load API with no folder of its own is not in the index)."""
    canary = spec.ENSEMBLE + CANARY_SUFFIX
    ready = {r.name for r in repo.index() if r.state == "READY"}
    return ready | ({canary} if repo.ready(canary) else set())


def canary_command(
    server: TritonServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    version: str,
    policy: list[str],
) -> tuple[int, str, list[int], set[str], list[dict[str, Any]], dict[str, Any], Load]:
    """``tritonrepo-client canary`` of the encoder's ``version`` with the ``policy`` options,
    run in process under :class:`Load`; then (exit status, its output, the encoder's serving
    versions, the ready models, the guard's decisions for the ensemble, the routes left, the
    load)."""
    o = server.options
    key_file = tmp_path / "repository.key"
    key_file.write_text(o.repository_key or "")
    argv = [
        "--url", o.http_url, "--repository-key-file", str(key_file),
        "canary", spec.ENSEMBLE, "--model", spec.ENCODER_MODEL, "--version", version, *policy,
        "--metrics-url", f"127.0.0.1:{o.metrics_port}",
    ]  # fmt: skip
    with (
        RepositoryClient(o.http_url, "http", key=o.repository_key) as repo,
        Load(o.http_url) as load,
    ):
        code = cli(argv)
        serving = repo.versions(spec.ENCODER_MODEL)
        loaded = ready_models(repo)
        routes = GuardRoutes(o.http_url, repo.headers)
        decisions = routes.decisions(spec.ENSEMBLE)
        left = routes.routes()
    out = capsys.readouterr().out
    print(out, f"load: {dict(load.counts)}")
    return code, out, serving, loaded, decisions, left, load


def run_canary(server: TritonServer, version: int):
    o = server.options
    with (
        RepositoryClient(o.http_url, "http", key=o.repository_key) as repo,
        Load(o.http_url) as load,
    ):
        routes = GuardRoutes(o.http_url, repo.headers)
        shares = LiveShares(server, routes)
        report = canary_rollout(repo, routes, f"127.0.0.1:{o.metrics_port}", spec.ENSEMBLE,
                                spec.ENCODER_MODEL, version, POLICY, shares)  # fmt: skip
        serving = repo.versions(spec.ENCODER_MODEL)
        loaded = ready_models(repo)
        left = routes.routes()
    shares.stats.close()
    print("\n" + "\n".join(shares.lines), f"\nlive shares: {shares.shares}",
          f"\nload: {dict(load.counts)}")  # fmt: skip
    return report, serving, loaded, left, load.counts, shares.shares


def guard_metrics(server: TritonServer) -> str:
    with urllib.request.urlopen(
        f"http://{server.options.http_url}/_guard/metrics", timeout=30
    ) as r:
        return r.read().decode()


def test_a_good_version_is_promoted_under_load(server):
    """Version 2 takes 10 % then 50 % of the live requests (measured from Triton's counters and
    the guard's shadow copies, not from the canary's own figures), and is promoted."""
    report, serving, loaded, left, counts, shares = run_canary(server, 2)
    assert report.decision == "promote", report
    assert set(shares) == set(POLICY.steps), shares
    for weight, (share, live) in shares.items():
        assert_share_near(weight, share, live)
    assert set(counts) == {"ok"} and counts["ok"] > 100, counts
    assert serving == [2]
    assert spec.ENSEMBLE + CANARY_SUFFIX not in loaded and left == {}
    assert any("window at 50 %" in line and "canary" in line for line in report.lines)
    text = guard_metrics(server)
    labels = 'model="text_embedding",canary="text_embedding__canary",decision="promote"'
    assert f"tritonrepo_canary_decisions_total{{{labels}}} 1" in text


def test_a_broken_version_is_rolled_back_by_itself_under_load(server, tmp_path, capsys):
    """``tritonrepo-client canary`` of version 9: rolled back by itself, for its answers or its
    latency, with exit status 3 and one line saying so; version 1 serves alone again."""
    run = canary_command(server, tmp_path, capsys, str(BROKEN), [
        "--steps", ",".join(f"{s:g}" for s in POLICY.steps), "--shadow", f"{POLICY.shadow:g}",
        "--window", str(POLICY.window_s), "--min-requests", str(POLICY.min_requests),
        "--max-p99-ratio", str(POLICY.max_p99_ratio),
    ])  # fmt: skip
    code, out, serving, loaded, decisions, left, load = run
    assert code == 3, out
    assert decisions[-1]["decision"] == "rollback", decisions
    reason = decisions[-1]["reason"]
    assert_rollback_reason(reason)
    assert out.splitlines()[-1].startswith(
        f"{spec.ENSEMBLE}: rollback of {spec.ENCODER_MODEL} version {BROKEN} (was 1) in "
    ) and out.splitlines()[-1].endswith(f": {reason}"), out
    assert set(load.counts) == {"ok"} and load.counts["ok"] > 50, load.counts
    assert serving == [1]
    assert spec.ENSEMBLE + CANARY_SUFFIX not in loaded and left == {}
    text = guard_metrics(server)
    assert 'decision="rollback"} 1' in text


def test_a_shadow_window_alone_reports_and_changes_nothing(server, tmp_path, capsys):
    """``tritonrepo-client canary --steps ''``: the guard copies a share of the load to version
    2's canary and compares the answers; the command reports the figures (exit 0, decision
    ``report``), moves no request to the canary, and leaves the encoder on version 1 alone."""
    run = canary_command(server, tmp_path, capsys, "2", [
        "--steps", "", "--shadow", "30", "--window", str(POLICY.window_s),
        "--min-requests", str(POLICY.min_requests), "--max-p99-ratio", str(POLICY.max_p99_ratio),
    ])  # fmt: skip
    code, out, serving, loaded, decisions, left, load = run
    made = [d["decision"] for d in decisions]
    assert code == 0, out
    assert f"{spec.ENSEMBLE}: report of {spec.ENCODER_MODEL} version 2 (was 1)" in out
    assert "window at 0 %" in out and "shadow window passed" in out
    assert made == ["start", "report"], made
    assert serving == [1]
    assert spec.ENSEMBLE + CANARY_SUFFIX not in loaded and left == {}
    assert set(load.counts) == {"ok"} and load.counts["ok"] > 50, load.counts
    assert 'decision="report"} 1' in guard_metrics(server)


def stopped_in_first_step(argv: list[str], sig: int) -> tuple[int, str]:
    """Run the canary command ``argv``, send ``sig`` 2 s into its 10 % step, and return its
    exit status and output (deadlines: 120 s to reach the step, 180 s to end)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)  # fmt: skip
    lines: list[str] = []
    deadline = time.monotonic() + 120.0
    try:
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            lines.append(proc.stdout.readline())
            if not lines[-1] or "step at 10 %" in lines[-1]:
                break
        assert "step at 10 %" in lines[-1], lines
        time.sleep(2.0)
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(lines) + rest


def test_a_stopped_canary_is_rolled_back_and_a_killed_one_aborted(server, tmp_path, capsys):
    """SIGTERM to ``tritonrepo-client canary`` in its 10 % step: the command rolls the canary
    back (a ``rollback`` decision ``interrupted``) and exits 130. SIGKILL leaves its state (a
    route, the canary ensemble, two versions, the step pinned): a new canary is refused with the
    way back, and ``canary --abort`` undoes it. Afterwards the encoder serves version 1 alone,
    unpinned, nothing of the canary is left, and no request of the load failed."""
    o = server.options
    key_file = tmp_path / "repository.key"
    key_file.write_text(o.repository_key or "")
    common = ["--url", o.http_url, "--repository-key-file", str(key_file),
              "canary", spec.ENSEMBLE, "--model", spec.ENCODER_MODEL]  # fmt: skip
    argv = [str(Path(sys.executable).parent / "tritonrepo-client"), *common,
            "--version", "2", "--steps", "10", "--shadow", "0", "--window", "120",
            "--metrics-url", f"127.0.0.1:{o.metrics_port}"]  # fmt: skip

    def state(repo: RepositoryClient, routes: GuardRoutes) -> tuple:
        step = step_of(repo.config(spec.ENSEMBLE), spec.ENCODER_MODEL)
        return (repo.versions(spec.ENCODER_MODEL), repo.ready(spec.ENSEMBLE + CANARY_SUFFIX),
                routes.routes(), str(step.get("model_version", "-1")))  # fmt: skip

    clean = ([1], False, {}, "-1")
    with (
        RepositoryClient(o.http_url, "http", key=o.repository_key) as repo,
        Load(o.http_url) as load,
    ):
        routes = GuardRoutes(o.http_url, repo.headers)
        code, out = stopped_in_first_step(argv, signal.SIGTERM)
        assert code == 130, out
        assert "interrupted; the canary of text_embedding_encoder is rolled back" in out
        decisions = [(d["decision"], d["reason"]) for d in routes.decisions(spec.ENSEMBLE)]
        assert decisions[-1] == ("rollback", "interrupted"), decisions
        assert state(repo, routes) == clean

        code, out = stopped_in_first_step(argv, signal.SIGKILL)
        assert code == -signal.SIGKILL, out
        left = state(repo, routes)
        assert left[:2] == ([1, 2], True) and spec.ENSEMBLE in left[2] and left[3] == "1", left
        with pytest.raises(ClientError, match=r"has a route already.*--abort"):
            canary_rollout(repo, routes, f"127.0.0.1:{o.metrics_port}", spec.ENSEMBLE,
                           spec.ENCODER_MODEL, 2, POLICY)  # fmt: skip
        assert cli([*common, "--abort"]) == 0
        assert state(repo, routes) == clean
        decisions = [(d["decision"], d["reason"]) for d in routes.decisions(spec.ENSEMBLE)]
        assert decisions[-1][0] == "rollback" and decisions[-1][1].startswith("aborted: route")
    printed = capsys.readouterr().out
    print(printed, f"load: {dict(load.counts)}")
    assert "canary aborted: route removed, text_embedding__canary unloaded" in printed
    assert set(load.counts) == {"ok"} and load.counts["ok"] > 50, load.counts


def test_grpc_clients_follow_the_guards_routes(server):
    """gRPC requests do not pass the guard: a connection with a RouteTable reads the guard's
    routes and sends the route's share to the canary itself (a draw under the weight goes to
    the canary, here a model that is not loaded, whose error names it; one above stays)."""
    o = server.options
    with RepositoryClient(o.http_url, "http", key=o.repository_key) as repo:
        routes = GuardRoutes(o.http_url, repo.headers)
        routes.set(spec.ENSEMBLE, Route(spec.ENSEMBLE + CANARY_SUFFIX, 10.0, 0.0))
        inputs = {"TEXT": np.array([[b"a cat"]], dtype=object)}
        try:
            for draw, goes_to_canary in ((0.05, True), (0.5, False)):
                table = RouteTable(o.http_url, draw=lambda d=draw: d)
                with TritonConnection(o.grpc_url, "grpc", routes=table) as conn:
                    if goes_to_canary:
                        with pytest.raises(ClientError, match=spec.ENSEMBLE + CANARY_SUFFIX):
                            conn.infer(spec.ENSEMBLE, inputs, ["EMBEDDING"], retry=False)
                    else:
                        answer = conn.infer(spec.ENSEMBLE, inputs, ["EMBEDDING"])
                        assert answer["EMBEDDING"].shape == (1, spec.HIDDEN_SIZE)
        finally:
            routes.remove(spec.ENSEMBLE)
        assert routes.routes() == {}
