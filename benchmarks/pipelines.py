"""``make bench-pipelines``: what a described pipeline costs its author and what serving it gives.

Usage: ``python -m benchmarks.pipelines [--pipeline NAME ...] [--seconds S]
[--out build/bench/pipelines]``

For each described pipeline (``pipelines/<name>/pipeline.toml``; default: every stateless one
with a built core, i.e. ``breast_cancer``, ``nudenet_detector`` and ``click_lightgbm``) one run
measures, on the same sample rows (the description's own ``samples()``):

1. **Lines the user wrote:** non-blank, non-comment lines of ``pipeline.toml`` and of the
   folder's ``.py`` files except ``check_*.py`` and ``__init__.py``; docstring lines are counted
   apart from code lines.
2. **Description to first served answer**, phase by phase (nothing in the checkout is deleted or
   written): ``python -m builders.pipeline.generate pipeline NAME --check`` (parse, every check,
   render every file, compare: generation minus the file writes), copying the generated model
   folders (configs and step ``model.py``, no ``model.onnx``) into a fresh temporary repository,
   ``python -m builders.pipeline.build NAME --repository TMP`` (so the core model is really
   built and parity-checked there), the launcher starting a server with only that pipeline
   until READY (the launcher's READY includes a probe inference), and the first ``infer``
   of a new HTTP client. The subprocess phases include the interpreter's start, as a user
   running them pays it.
3. **Served vs in-process**, one item per request: the served pipeline (that fresh server, CPU
   configs, HTTP through the HTTP guard as the launcher serves by default, ``PipelineClient``,
   one client per worker thread) and the same pipeline in this
   process (the description's preprocess → one shared ONNX Runtime session on the checkout's
   built ``model.onnx`` → postprocess, as ``tests.pipeline_suite.in_process`` does) at
   concurrency 1 and 16 (threads, closed loop: ``benchmarks.loadgen``), plus in-process with
   the best batch of a short sweep as the reference ceiling. Outputs are checked before timing
   (served = in-process = the test suite's ``in_process`` on every sample row). The server is
   stopped before the in-process rows run, so they do not share the two cores.
4. **Served vs FastAPI**: the same pipeline as the FastAPI service a user would write (one
   route, JSON body, gunicorn with 1, 2 and one-per-core uvicorn workers, each layout alone;
   :mod:`benchmarks.pipelines_vs_fastapi`), answers checked on every sample row, at the same
   concurrency levels; the report states served c=16 throughput and c=1 p50 against the best
   layout.

Writes ``report.md`` (the tables) and ``results.json`` into ``--out``. Ratios are served over
in-process from this run.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tokenize
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import loadgen, machine
from benchmarks.loadgen import Measurement
from builders.pipeline.in_process import InProcess
from tritonrepo.description import Pipeline, import_ref, load
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY, PIPELINES, REPO_ROOT

DEFAULT_PIPELINES = ("breast_cancer", "nudenet_detector", "click_lightgbm")
CONCURRENCY = (1, 16)
BATCHES = (1, 4, 8, 16, 32)  # in-process batch sweep (capped at the description's max batch)
WARMUP_S = 1.0
ARTIFACT_FILES = ("model.onnx", "build_metadata.json", "__pycache__")  # not copied: built there


# --- 1. lines the user wrote -------------------------------------------------------------------


@dataclass
class FileLines:
    """One file's lines: ``code`` (non-blank, non-comment, outside docstrings) and
    ``docstring`` (non-blank lines inside module/class/function docstrings)."""

    path: str
    code: int
    docstring: int


def _docstring_lines(source: str) -> set[int]:
    """1-based line numbers covered by module, class and function docstrings."""
    lines: set[int] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                lines.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return lines


def python_lines(path: Path) -> FileLines:
    """Count a ``.py`` file's code and docstring lines (comments and blank lines excluded)."""
    source = path.read_text()
    doc = _docstring_lines(source)
    comment_only: set[int] = set()
    code_tokens: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comment_only.add(tok.start[0])
        elif tok.type not in (
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            code_tokens.update(range(tok.start[0], tok.end[0] + 1))
    text = source.splitlines()
    code = docstring = 0
    for number, line in enumerate(text, start=1):
        if not line.strip():
            continue
        if number in doc:
            docstring += 1
        elif number in code_tokens:
            code += 1
    return FileLines(path.relative_to(REPO_ROOT).as_posix(), code, docstring)


def toml_lines(path: Path) -> FileLines:
    """Count a TOML file's non-blank lines that are not ``#`` comments."""
    code = sum(
        1
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    return FileLines(path.relative_to(REPO_ROOT).as_posix(), code, 0)


def user_lines(pipeline: Pipeline) -> dict[str, Any]:
    """The lines of the description and its code (module docstring, point 1)."""
    files = [toml_lines(pipeline.source)]
    for path in sorted(pipeline.folder.glob("*.py")):
        if path.name == "__init__.py" or path.name.startswith("check_"):
            continue
        files.append(python_lines(path))
    toml = files[0].code
    code = sum(f.code for f in files[1:])
    return {
        "toml": toml,
        "python_code": code,
        "python_docstrings": sum(f.docstring for f in files[1:]),
        "total": toml + code,
        "files": [asdict(f) for f in files],
    }


# --- 2. description to first served answer -----------------------------------------------------


def _timed_command(args: Sequence[str], log: Path) -> float:
    """Run ``python ARGS`` in the checkout; its output goes to ``log``; seconds taken.

    Raises:
        SystemExit: the command failed (its output is in ``log``).
    """
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    log.write_text(f"$ python {' '.join(args)}\n{done.stdout}{done.stderr}")
    if done.returncode != 0:
        raise SystemExit(f"`python {' '.join(args)}` exited {done.returncode}: see {log}")
    return seconds


def models_of(pipeline: Pipeline) -> list[str]:
    """The ensemble and its three steps, as named in the model repository."""
    return [
        pipeline.name,
        pipeline.preprocess.model,
        pipeline.core.model,
        pipeline.postprocess.model,
    ]


def copy_generated(pipeline: Pipeline, repository: Path) -> None:
    """Copy the pipeline's generated model folders from the checkout's repository into
    ``repository``, without built artifacts (``model.onnx``, ``build_metadata.json``)."""
    for model in models_of(pipeline):
        shutil.copytree(
            MODEL_REPOSITORY / model,
            repository / model,
            ignore=shutil.ignore_patterns(*ARTIFACT_FILES),
        )


def server_options(log_file: Path, repository: Path, models: Sequence[str]):
    """The test suite's server options (free ports, random repository key, CPU configs) for
    ``repository``, serving only ``models``."""
    from tests.conftest import server_options as test_options

    return test_options(
        log_file.stem, log_file=log_file, model_repository=repository, models=tuple(models)
    )


# --- the other processes on the machine ------------------------------------------------------


def _busy_and_own_s() -> tuple[float, float]:
    """(CPU seconds all processes used since boot, CPU seconds of this process and its
    descendants: the server and its stubs), from ``/proc``."""
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]  # all but idle and iowait
    parent: dict[int, int] = {}
    cpu: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                rest = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(rest[1])
        cpu[int(entry)] = int(rest[11]) + int(rest[12])
    ours, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        pid = frontier.pop()
        kids = [c for c, p in parent.items() if p == pid and c not in ours]
        ours.update(kids)
        frontier += kids
    return busy / tick, sum(cpu.get(p, 0) for p in ours) / tick


class ForeignLoad:
    """The share of the machine's cores that processes other than this benchmark's used while
    the ``with`` block ran (other jobs on a shared machine skew every figure)."""

    def __enter__(self) -> ForeignLoad:
        self.start = (time.monotonic(), *_busy_and_own_s())
        return self

    def __exit__(self, *exc: object) -> None:
        wall, busy, own = (
            a - b for a, b in zip((time.monotonic(), *_busy_and_own_s()), self.start, strict=True)
        )
        cores = len(os.sched_getaffinity(0))
        self.share = max(0.0, busy - own) / (wall * cores) if wall > 0 else 0.0


# --- 3. served vs in-process -------------------------------------------------------------------


class TimedInProcess(InProcess):
    """The pipeline in this process with one ONNX Runtime session shared by every caller, set
    as the served core's (``tests.pipeline_suite.in_process`` opens a session per call), and
    the time spent in each stage when :attr:`timing` is on."""

    def __init__(self, pipeline: Pipeline, model_file: Path) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()  # as configs/cpu.pbtxt: 0 threads = one per core
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        super().__init__(pipeline, model_file, options)
        self.stage_s = {"preprocess": 0.0, "onnxruntime": 0.0, "postprocess": 0.0}
        self.timing = False

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Batch-first request tensors → the pipeline's outputs (numpy, batch-first)."""
        t0 = time.perf_counter()
        pre = self.pre(dict(inputs))
        feeds = self.core_feeds(pre)
        t1 = time.perf_counter()
        results = self.run_core(feeds)
        t2 = time.perf_counter()
        out = self.post(self.post_inputs(pre, results))
        if self.timing:
            self.stage_s["preprocess"] += t1 - t0
            self.stage_s["onnxruntime"] += t2 - t1
            self.stage_s["postprocess"] += time.perf_counter() - t2
        return out


def rows_of(samples: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """One single-row request per sample row."""
    n = len(next(iter(samples.values())))
    return [{k: np.asarray(v[i : i + 1]) for k, v in samples.items()} for i in range(n)]


def batch_of(samples: dict[str, np.ndarray], size: int, start: int) -> dict[str, np.ndarray]:
    """``size`` sample rows from ``start``, cycling through the samples."""
    n = len(next(iter(samples.values())))
    index = (np.arange(size) + start) % n
    return {k: np.asarray(v)[index] for k, v in samples.items()}


def client_caller(name: str, url: str) -> loadgen.CallerFactory:
    """Workers with their own HTTP :class:`PipelineClient`."""
    from tritonrepo_client import PipelineClient

    def make():
        client = PipelineClient(name, url, "http")
        return (lambda request: (client.infer(request), None)[1]), client.close

    return make


def local_caller(pipeline: TimedInProcess) -> loadgen.CallerFactory:
    """Workers calling the shared in-process pipeline."""
    return lambda: ((lambda request: (pipeline(request), None)[1]), lambda: None)


def timed_batches(
    pipeline: TimedInProcess, batches: Sequence[dict[str, np.ndarray]], seconds: float
) -> Measurement:
    """One thread calling ``pipeline`` on ``batches`` in turn, after one warm-up call, until
    ``seconds`` have passed and at least 3 calls were made (a window alone would count no call
    of a batch slower than it); latencies are per call."""
    pipeline(batches[0])
    latencies: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds or len(latencies) < 3:
        sent = time.perf_counter()
        pipeline(batches[len(latencies) % len(batches)])
        latencies.append(time.perf_counter() - sent)
    return Measurement.from_latencies(1, latencies, time.perf_counter() - started, 0)


@dataclass
class Row:
    """One measured system of one pipeline; ``items_per_s`` = requests/s x batch."""

    system: str
    concurrency: int
    batch: int
    items_per_s: float
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int
    notes: str = ""
    foreign_cpu: float = 0.0

    @classmethod
    def of(
        cls, system: str, m: Measurement, load: ForeignLoad, batch: int = 1, notes: str = ""
    ) -> Row:
        return cls(
            system,
            m.concurrency,
            batch,
            m.throughput * batch,
            m.p50_ms,
            m.p99_ms,
            m.requests,
            m.errors,
            notes,
            load.share,
        )


@dataclass
class Result:
    """Everything measured for one pipeline."""

    pipeline: str
    summary: str
    sample_rows: int
    lines: dict[str, Any]
    phases_s: dict[str, float]
    rows: list[Row] = field(default_factory=list)
    stage_ms_batch1: dict[str, float] = field(default_factory=dict)
    batch_sweep: dict[int, float] = field(default_factory=dict)
    checks: str = ""
    phases_foreign_cpu: float = 0.0


def check_outputs(got: dict[str, np.ndarray], want: dict[str, Any], where: str) -> None:
    """The test suite's comparison (numbers within 1e-5, BYTES equal); SystemExit on a
    difference."""
    from tests.pipeline_suite import assert_same

    try:
        assert_same(got, want, where)
    except AssertionError as exc:
        raise SystemExit(f"outputs differ before timing: {exc}") from exc


def measure_pipeline(name: str, seconds: float, out: Path, say: Callable[[str], None]) -> Result:
    """Points 1-3 of the module docstring for one pipeline; every server started is stopped.

    Raises:
        SystemExit: a phase failed or outputs differ (the message says which).
    """
    from tests.pipeline_suite import in_process as suite_in_process
    from tritonrepo.server.launcher import TritonServer
    from tritonrepo_client import PipelineClient

    pipeline = load(PIPELINES / name / "pipeline.toml")
    if pipeline.core.builder is not None:
        raise SystemExit(f"{name}: its core is built by its own builder, not described")
    samples = dict(import_ref(pipeline.samples)())
    requests = rows_of(samples)
    model_file = MODEL_REPOSITORY / pipeline.core.model / str(pipeline.core.versions[0])
    model_file = model_file / "model.onnx"
    if not model_file.is_file():
        raise SystemExit(f"{model_file} is missing: run `make artifacts`")
    local = TimedInProcess(pipeline, model_file)
    want = local(samples)
    check_outputs(want, suite_in_process(pipeline, samples), f"{name}: shared session vs suite")
    result = Result(name, pipeline.summary, len(requests), user_lines(pipeline), {})
    phases = result.phases_s

    phases_load = ForeignLoad().__enter__()
    say(f"{name}: generate --check")
    phases["generate --check"] = _timed_command(
        ["-m", "builders.pipeline.generate", "pipeline", name, "--check"],
        out / f"{name}.generate.log",
    )
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        repository = Path(tmp) / "model_repository"
        started = time.perf_counter()
        copy_generated(pipeline, repository)
        phases["copy generated files"] = time.perf_counter() - started
        say(f"{name}: build (fresh, into {repository})")
        phases["build core model"] = _timed_command(
            ["-m", "builders.pipeline.build", name, "--repository", str(repository)],
            out / f"{name}.build.log",
        )
        if not (
            repository / pipeline.core.model / str(pipeline.core.versions[0]) / "model.onnx"
        ).is_file():
            raise SystemExit(f"{name}: the build wrote no model.onnx into {repository}")
        say(f"{name}: server start")
        options = server_options(out / f"{name}.tritonserver.log", repository, (name,))
        options.http_guard = True  # as the launcher serves by default
        server = TritonServer(options)
        started = time.perf_counter()
        server.start()
        try:
            phases["server start to READY"] = time.perf_counter() - started
            started = time.perf_counter()
            with PipelineClient(name, options.http_url, "http") as client:
                first = client.infer(requests[0])
                phases["first infer"] = time.perf_counter() - started
                check_outputs(first, {k: np.asarray(v)[:1] for k, v in want.items()}, "row 0")
                for i, request in enumerate(requests):
                    got = client.infer(request)
                    check_outputs(
                        got,
                        {k: np.asarray(v)[i : i + 1] for k, v in want.items()},
                        f"{name}: served row {i}",
                    )
            result.checks = (
                f"served (fresh build) = in-process = tests.pipeline_suite.in_process on all "
                f"{len(requests)} sample rows (atol/rtol 1e-5, BYTES equal)"
            )
            for level in CONCURRENCY:
                say(f"{name}: served c={level}")
                with ForeignLoad() as load_:
                    m = loadgen.run_closed_loop(
                        client_caller(name, options.http_url), requests, level, seconds, WARMUP_S
                    )
                result.rows.append(Row.of("served (HTTP guard, PipelineClient)", m, load_))
        finally:
            server.stop()
    phases["total"] = sum(phases.values())
    phases_load.__exit__()
    result.phases_foreign_cpu = phases_load.share
    from benchmarks.pipelines_vs_fastapi import measure_fastapi

    result.rows += measure_fastapi(pipeline, requests, want, seconds, out, say)
    result.checks += "; every FastAPI layout = in-process on every sample row"

    local.timing = True
    for _ in range(3):
        for request in requests:
            local(request)
    calls = 3 * len(requests)
    result.stage_ms_batch1 = {k: v / calls * 1e3 for k, v in local.stage_s.items()}
    local.timing = False
    for level in CONCURRENCY:
        say(f"{name}: in-process c={level}")
        with ForeignLoad() as load_:
            m = loadgen.run_closed_loop(local_caller(local), requests, level, seconds, WARMUP_S)
        result.rows.append(Row.of("in-process (1 shared ORT session)", m, load_))
    sweep_s = max(1.0, seconds / 4)
    best: tuple[float, Measurement | None, int, ForeignLoad | None] = (0.0, None, 1, None)
    for size in [b for b in BATCHES if b <= pipeline.max_batch_size]:
        say(f"{name}: in-process batch {size}")
        batches = [batch_of(samples, size, start) for start in range(len(requests))]
        with ForeignLoad() as load_:
            m = timed_batches(local, batches, sweep_s)
        result.batch_sweep[size] = m.throughput * size
        if m.throughput * size > best[0]:
            best = (m.throughput * size, m, size, load_)
    _, m, size, load_ = best
    assert m is not None and load_ is not None
    result.rows.append(
        Row.of(f"in-process, best batch ({size})", m, load_, size, "latency per batch call")
    )
    return result


# --- report ------------------------------------------------------------------------------------


def _ratio(a: Row | None, b: Row | None) -> str:
    if not (a and b and b.items_per_s):
        return "–"
    ratio = a.items_per_s / b.items_per_s
    return f"{ratio:.2f}×" if ratio >= 0.1 else f"{ratio:.2g}×"


def report(results: list[Result], facts: dict[str, str], seconds: float, started: str) -> str:
    """The markdown report: lines, phases, and the served/in-process table."""
    lines = [
        "# Benchmark: described pipelines, served vs in-process",
        "",
        f"Run {started}: `python -m benchmarks.pipelines` ({seconds:g} s per measurement after "
        f"{WARMUP_S:g} s warm-up). Machine: {facts['cpu']}, {facts['cores']} cores, "
        f"{facts['memory']}; Python {facts['python']}, onnxruntime {facts['onnxruntime']}, "
        f"tritonserver {facts['tritonserver']}, CPU configs.",
        "",
        "## Lines the user wrote",
        "",
        "Non-blank, non-comment lines; `.py` = the folder's modules except `__init__.py` and "
        "`check_*.py`; docstring lines counted apart.",
        "",
        "| pipeline | pipeline.toml | Python code | total | + Python docstring lines | files |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        files = ", ".join(f"`{Path(f['path']).name}` {f['code']}" for f in r.lines["files"])
        lines.append(
            f"| {r.pipeline} | {r.lines['toml']} | {r.lines['python_code']} | "
            f"**{r.lines['total']}** | {r.lines['python_docstrings']} | {files} |"
        )
    phase_names = list(results[0].phases_s) if results else []
    lines += [
        "",
        "## Description to first served answer (seconds)",
        "",
        "`generate --check`: the generator's parse, checks and rendering against the checkout "
        "(writes nothing); copy: the generated folders into a fresh temporary repository; build: "
        "`builders.pipeline.build NAME --repository TMP` (model obtained, parity-checked, "
        "written); server: the launcher, only that pipeline, until READY (including its probe "
        "inference); first infer: a new HTTP client's first request.",
        "",
        "| pipeline | " + " | ".join(phase_names) + " | other jobs' CPU |",
        "|---|" + "---|" * (len(phase_names) + 1),
    ]
    for r in results:
        cells = [f"**{v:.1f}**" if k == "total" else f"{v:.2f}" for k, v in r.phases_s.items()]
        cells.append(f"{r.phases_foreign_cpu:.0%}")
        lines.append(f"| {r.pipeline} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Served vs in-process, one item per request",
        "",
        "Closed loop over the description's sample rows (`samples()`), one row per request; "
        "served: HTTP through the HTTP guard, `PipelineClient`, one per worker thread, the "
        "fresh server above; "
        "in-process: the same functions and one ONNX Runtime session shared by the threads "
        "(the served core's settings: one intra-op thread per core, no spinning), server "
        "stopped. Other jobs' CPU: the share of the cores that processes outside this "
        "benchmark used during the measurement (a shared machine). Ratio: served / in-process "
        "at the same concurrency; for the best-batch row, served c=16 / it.",
        "",
        "FastAPI rows: the same functions behind one FastAPI route (JSON body), one ONNX Runtime "
        "session per worker, gunicorn with uvicorn workers, each layout alone on the machine.",
        "",
        "| pipeline | system | concurrency | items/s | p50 ms | p99 ms | ratio | other jobs' CPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        served = {x.concurrency: x for x in r.rows if x.system.startswith("served")}
        local = {x.concurrency: x for x in r.rows if x.system.startswith("in-process (")}
        best = next((x for x in r.rows if "best batch" in x.system), None)
        for x in r.rows:
            if x.system.startswith("served"):
                ratio = _ratio(x, local.get(x.concurrency))
            elif x is best:
                ratio = f"{_ratio(served.get(16), x)} (served c=16 / this)"
            else:
                ratio = ""
            note = f" ({x.notes})" if x.notes else ""
            errors = f", {x.errors} errors" if x.errors else ""
            lines.append(
                f"| {r.pipeline} | {x.system}{note}{errors} | {x.concurrency} | "
                f"{x.items_per_s:.1f} | {x.p50_ms:.2f} | {x.p99_ms:.2f} | {ratio} | "
                f"{x.foreign_cpu:.0%} |"
            )
    from benchmarks.pipelines_vs_fastapi import comparison, comparison_section

    lines += comparison_section([e for r in results for e in comparison(r.pipeline, r.rows)])
    lines += [
        "",
        "In-process, where one item's time goes (batch 1, mean ms) and the batch sweep:",
        "",
    ]
    for r in results:
        stages = ", ".join(f"{k} {v:.2f}" for k, v in r.stage_ms_batch1.items())
        sweep = ", ".join(f"{b}: {v:.0f}" for b, v in r.batch_sweep.items())
        lines.append(
            f"- **{r.pipeline}** ({r.sample_rows} sample rows): {stages}; "
            f"items/s by batch {sweep}. Checks: {r.checks}."
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.pipelines", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--pipeline",
        action="append",
        help="repeatable (default: " + ", ".join(DEFAULT_PIPELINES) + ")",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement (10)")
    parser.add_argument("--out", type=Path, default=BUILD_DIR / "bench" / "pipelines")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit 1 with a one-line reason when a pipeline cannot be measured."""
    args = parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    clock = time.monotonic()
    lock = threading.Lock()

    def say(what: str) -> None:
        with lock:
            print(f"[{time.monotonic() - clock:6.1f} s] {what}", file=sys.stderr, flush=True)

    from benchmarks.pipelines_vs_fastapi import comparison

    results = []
    try:
        for name in args.pipeline or DEFAULT_PIPELINES:
            results.append(measure_pipeline(name, args.seconds, out, say))
    except SystemExit as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    facts = machine.facts()
    (out / "results.json").write_text(
        json.dumps(
            {
                "started": started,
                "seconds": args.seconds,
                "machine": facts,
                "results": [asdict(r) for r in results],
                "served_vs_fastapi": [e for r in results for e in comparison(r.pipeline, r.rows)],
            },
            indent=1,
        )
        + "\n"
    )
    text = report(results, facts, args.seconds, started)
    (out / "report.md").write_text(text)
    print(text)
    say(f"done: {out / 'report.md'}, {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
