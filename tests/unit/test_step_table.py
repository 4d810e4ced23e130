"""Per-step statistics deltas, the step table and perf_analyzer's client accounting.

The fixture ``tests/data/step_stats_c8.json`` holds real ``/v2/models/<m>/stats`` answers of
the text_embedding steps (cpu config) right before and after one perf_analyzer level (c=8),
and that level's CSV row; the "before" snapshot already counts an earlier level, so a delta
that ignores it gives other numbers. Expected values are computed here straight from the raw
JSON, not through the code under test.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

from benchmarks.harness import perf_analyzer, step_table
from benchmarks.harness.loadgen import Measurement
from benchmarks.harness.perf_analyzer import ClientUsage, Level
from benchmarks.harness.triton_side import LevelSteps, Sweep, parse_stats

FIXTURE = json.loads((Path(__file__).parents[1] / "data" / "step_stats_c8.json").read_text())
MODELS = tuple(FIXTURE["after"])


def raw_sum(snapshot: list[dict], key: str, field: str = "ns") -> int:
    """``inference_stats[key][field]`` summed over versions, read directly from the JSON."""
    return sum(int(v["inference_stats"][key][field]) for v in snapshot)


def raw_delta(model: str, key: str, field: str = "ns") -> int:
    return raw_sum(FIXTURE["after"][model], key, field) - raw_sum(
        FIXTURE["before"][model], key, field
    )


def raw_count_delta(model: str, key: str) -> int:
    return sum(int(v[key]) for v in FIXTURE["after"][model]) - sum(
        int(v[key]) for v in FIXTURE["before"][model]
    )


def delta(model: str):
    return parse_stats(FIXTURE["after"][model]).since(parse_stats(FIXTURE["before"][model]))


def fixture_level(usage: ClientUsage | None = None) -> LevelSteps:
    m = Measurement(
        FIXTURE["concurrency"], FIXTURE["throughput"], math.nan, math.nan, FIXTURE["p99_ms"], -1, 0
    )
    usage = usage or ClientUsage(0.5, 5.0, 15, 4, (14, 15), 16)
    level = Level(m, perf_analyzer.mean_latency_ms(FIXTURE["csv_row"]), usage)
    return LevelSteps(
        FIXTURE["concurrency"], {m: delta(m) for m in MODELS}, FIXTURE["wall_s"], level
    )


def cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip("|").split("|")]


def test_fixture_is_a_real_window_after_earlier_traffic():
    assert len(MODELS) == 3 and all(m.startswith("text_embedding_") for m in MODELS)
    for model in MODELS:
        assert raw_sum(FIXTURE["before"][model], "success", "count") > 0
        assert raw_delta(model, "success", "count") > 0


@pytest.mark.parametrize("model", MODELS)
def test_delta_subtracts_the_before_snapshot(model):
    d = delta(model)
    requests = raw_delta(model, "success", "count")
    assert d.requests == requests
    assert d.queue_ns == raw_delta(model, "queue")
    assert d.compute_infer_ns == raw_delta(model, "compute_infer")
    ms = d.per_request_ms()
    assert ms["queue"] == pytest.approx(raw_delta(model, "queue") / requests / 1e6)
    assert ms["infer"] == pytest.approx(raw_delta(model, "compute_infer") / requests / 1e6)
    parts = ("compute_input", "compute_infer", "compute_output")
    compute = sum(raw_delta(model, p) for p in parts) / requests / 1e6
    assert d.compute_ms() == pytest.approx(compute)
    # The cumulative average (no delta) is a different number in this fixture.
    after = parse_stats(FIXTURE["after"][model])
    assert after.per_request_ms()["queue"] != pytest.approx(ms["queue"], rel=0.01)


@pytest.mark.parametrize("model", MODELS)
def test_average_batch_is_inferences_over_executions(model):
    d = delta(model)
    inferences = raw_count_delta(model, "inference_count")
    executions = raw_count_delta(model, "execution_count")
    assert (d.inferences, d.executions) == (inferences, executions)
    assert d.average_batch == pytest.approx(inferences / executions)
    # Triton's batch_stats tell the same story (sum of size x count over executions).
    runs = sum(d.batches.values())
    assert runs == executions
    assert sum(b * n for b, n in d.batches.items()) / runs == pytest.approx(d.average_batch)


def test_mean_latency_sums_the_csv_breakdown():
    row = FIXTURE["csv_row"]
    expected = sum(float(row[p]) for p in perf_analyzer.LATENCY_PARTS) / 1e3
    assert perf_analyzer.mean_latency_ms(row) == pytest.approx(expected)
    assert perf_analyzer.mean_latency_ms(row | {"Avg latency": "12500"}) == 12.5
    assert math.isnan(perf_analyzer.mean_latency_ms({"p50 latency": "1"}))
    # Within 15 % of Little's law (c / throughput) for this closed-loop level.
    little = 1e3 * FIXTURE["concurrency"] / FIXTURE["throughput"]
    assert expected == pytest.approx(little, rel=0.15)


def test_step_table_rows_carry_the_delta_numbers():
    level = fixture_level()
    lines = step_table.step_table(Sweep([level]))
    assert lines[0] == step_table.STEP_HEADER and len(lines) == 2 + len(MODELS)
    e2e = perf_analyzer.mean_latency_ms(FIXTURE["csv_row"])
    shares = 0.0
    for model, row in zip(MODELS, lines[2:], strict=True):
        got = cells(row)
        requests = raw_delta(model, "success", "count")
        queue = raw_delta(model, "queue") / requests / 1e6
        parts = [
            raw_delta(model, p) / requests / 1e6
            for p in ("compute_input", "compute_infer", "compute_output")
        ]
        executions = raw_count_delta(model, "execution_count")
        assert got[0] == model and got[1] == str(FIXTURE["concurrency"])
        assert float(got[2]) == pytest.approx(
            raw_count_delta(model, "inference_count") / executions, abs=0.05
        )
        assert float(got[3]) == pytest.approx(executions / FIXTURE["wall_s"], abs=0.05)
        assert float(got[4]) == pytest.approx(queue, abs=5e-4)
        total, rest = got[5].split(" ", 1)
        assert float(total) == pytest.approx(sum(parts), abs=5e-4)
        assert [float(x) for x in rest.strip("()").split("/")] == pytest.approx(parts, abs=5e-4)
        share = 100 * (queue + sum(parts)) / e2e
        assert got[6] == f"{share:.0f} %"
        shares += share
    assert 50 < shares <= 105  # the steps account for most of each request, not more


def test_client_table_and_values():
    level = fixture_level(ClientUsage(0.5, 5.0, 15, 4, (14, 15), 16))
    failed = LevelSteps(64, {}, 3.0, None)
    lines = step_table.client_table([level, failed])
    got = cells(lines[2])
    assert got[0] == "8" and got[4] == "0.10" and got[5] == "0.5 / 5.0"
    assert got[6:] == ["15", "14-15", "16"]
    assert cells(lines[3])[:2] == ["64", "failed"]
    values = step_table.client_values([level, failed])
    assert values == {"client_cores_c8": 0.1, "client_threads_c8": 15.0, "host_cores": 16.0}
    note = step_table.client_note([level])
    assert note == "perf_analyzer cores c8: 0.10 (of 16, pinned to 14-15, --async 4 threads)"
    text = "\n".join(step_table.lines([level], title="t"))
    assert text.startswith("### t\n") and "--async --max-threads 4" in text


def test_client_cpus_pins_only_large_hosts():
    assert perf_analyzer.client_cpus(tuple(range(8))) == ()
    assert perf_analyzer.client_cpus(tuple(range(16))) == (14, 15)
    assert perf_analyzer.client_cpus(tuple(range(128))) == tuple(range(112, 128))
    assert perf_analyzer.cpu_list((14, 15)) == "14-15"
    assert perf_analyzer.cpu_list((1, 3, 4, 5, 9)) == "1,3-5,9"


def test_run_level_asks_for_async_with_bounded_threads(tmp_path, monkeypatch):
    calls = []
    row = FIXTURE["csv_row"]

    def fake_run(cmd, cpus, timeout_s):
        calls.append((cmd, cpus))
        report = Path(cmd[cmd.index("-f") + 1])
        report.write_text(",".join(row) + "\n" + ",".join(row.values()) + "\n")
        return 0, "", 1.0, 4.0, 11

    monkeypatch.setattr(perf_analyzer, "_run", fake_run)
    monkeypatch.setattr(perf_analyzer, "binary", lambda: "perf_analyzer")
    args = ("m", "h:1", tmp_path / "in.json", 256, tmp_path / "r.csv", perf_analyzer.Window())
    level = perf_analyzer.run_level(*args, pin=(2, 3))
    cmd, cpus = calls[-1]
    assert cmd[cmd.index("--max-threads") + 1] == str(perf_analyzer.CLIENT_THREADS)
    assert "--async" in cmd and cpus == (2, 3)
    assert level.client.cores == 0.25 and level.client.peak_threads == 11
    assert level.measurement.throughput == pytest.approx(float(row["Inferences/Second"]))
    perf_analyzer.run_level(*args, client_threads=None, pin=())
    cmd, cpus = calls[-1]
    assert "--async" not in cmd and "--max-threads" not in cmd and cpus == ()


def test_run_counts_the_child_cpu_and_pins_it():
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    core = min(os.sched_getaffinity(0))
    code, _, cpu_s, wall_s, _ = perf_analyzer._run([sys.executable, "-c", busy], (core,), 60)
    assert code == 0 and cpu_s >= 0.3 and wall_s >= cpu_s * 0.9
    show = "import os; print(sorted(os.sched_getaffinity(0)))"
    _, out, _, _, _ = perf_analyzer._run([sys.executable, "-c", show], (core,), 60)
    assert out.strip() == str([core])
