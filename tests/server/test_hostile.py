"""The hostile-request catalogue (``tests/hostile_cases.py``) against real servers: each case on
a throwaway server (never the session's), direct and behind the HTTP guard.

Cases are grouped by the models they need; one server per group is reused until a case ends
it, then a fresh one is started with the same options. For every case the stated outcome is
asserted: a refusal is an error of its own (status and message) after which the process is
alive and every loaded model still answers a real inference (the launcher's probes); a served
case's answer is checked; a dying case's process must end by the stated signal. Behind the
guard no case may end the process. The suite writes ``build/hostile/results.json`` and
``build/hostile/report.md`` (the table of ``docs/security/hostile_requests.md``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import pytest

from tests.conftest import require_artifacts, server_options
from tests.hostile_cases import CASES
from tests.hostile_requests import DIES, REFUSED, SERVED, STUB_DIES, Case, Outcome
from tests.hostile_transport import CLOSED, Reply
from tritonrepo.paths import BUILD_DIR
from tritonrepo.server.launcher import LaunchError, TritonServer, one_line

pytestmark = pytest.mark.server

OUT_DIR = BUILD_DIR / "hostile"
DEATH_WAIT_S = 10.0  # after a connection closed unanswered: a dying process ends within this
# The launcher's restart: backoff, start, reload, probes; an attempt not live within the
# startup timeout (180 s) is killed and tried again, so two attempts fit.
RESTART_WAIT_S = 450.0
PROGRESS = os.environ.get("HOSTILE_PROGRESS") == "1"  # one line per case on stderr
GRACE_S = 0.3  # after the answer, before judging the process alive


@dataclass
class Observation:
    """What one case did: its reply, the process's fate, the health after it."""

    status: str = ""
    text: str = ""
    signal: str = ""  # name of the signal that ended the process ("" = alive)
    exit_code: int | None = None
    back_after_s: float | None = None  # the launcher's restart: death noticed -> serving again
    failed_restarts: list[str] = field(default_factory=list)  # attempts before the one that served
    healthy: bool | None = None  # every loaded model answered its probe inference afterwards
    stubs_died: list[str] = field(default_factory=list)  # Python-backend stub instances lost
    health_detail: str = ""
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        if self.signal:
            back = f", back in {self.back_after_s:.0f} s" if self.back_after_s is not None else ""
            if self.failed_restarts:
                back += f" at attempt {len(self.failed_restarts) + 1}"
            return f"process died ({self.signal}){back}"
        if self.status in ("200", "StatusCode.OK"):
            return "served, server alive" if self.healthy else "served, server unhealthy"
        state = "server alive" if self.healthy else "server unhealthy"
        if self.stubs_died:
            state += f", stub {', '.join(self.stubs_died)} died"
        return f"{self.status.replace('StatusCode.', '')}, {state}"


class ServerGroup:
    """Throwaway servers of one model set, run by the launcher with ``restart_on_crash`` (a
    case that ends the process is followed by the launcher's restart, on the same ports);
    ``guarded``: the launcher's ``http_guard`` puts the HTTP guard on the HTTP port."""

    def __init__(self, models: tuple[str, ...], guarded: bool) -> None:
        tag = ("guarded_" if guarded else "") + "_".join(models)
        self.options = server_options(
            f"test_hostile_{tag}",
            models=models,
            http_guard=guarded,
            restart_on_crash=True,
            restart_backoff_s=0.1,
            restart_max_backoff_s=0.5,
            restart_limit=1000,
        )
        self.server: TritonServer | None = None

    def ensure(self) -> TritonServer:
        """The group's server, started (again) when there is none or its restart failed."""
        if self.server is not None and getattr(self.server, "failure", None) is None:
            return self.server
        self.close()
        self.server = TritonServer(self.options).start()
        return self.server

    def port(self, case: Case) -> int:
        """gRPC port for gRPC cases, else the HTTP port (the guard's when guarded)."""
        return self.options.grpc_port if case.protocol == "grpc" else self.options.http_port

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def wait_restart(server: TritonServer, before: int, timeout_s: float) -> list:
    """The launcher's restart records after ``before`` earlier ones, up to the first that
    serves again (the launcher tries again after an attempt that failed), or up to its giving
    up or ``timeout_s`` seconds; the last record is the one that served when any did."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records = server.restarts[before:]
        if any(r.ok for r in records) or getattr(server, "failure", None) is not None:
            break
        time.sleep(0.2)
    records = server.restarts[before:]
    served = [i for i, r in enumerate(records) if r.ok]
    return records[: served[0] + 1] if served else records


def run_case(group: ServerGroup, case: Case) -> Observation:
    """Send ``case`` to ``group``'s server and observe what happened to it: the reply, the
    process's end and the launcher's restart, the health of every model afterwards."""
    server = group.ensure()
    if PROGRESS:
        print(f"-> {case.name}", file=sys.stderr, flush=True)
    process, before = server.process, len(server.restarts)
    assert process is not None
    stubs = {stub.instance: stub.pid for stub in server.stub_processes()}
    started = time.monotonic()
    reply: Reply = case.send(server.options.client_host, group.port(case))
    obs = Observation(status=reply.status, text=one_line(reply.text, 300))
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=DEATH_WAIT_S if reply.status == CLOSED else GRACE_S)
    obs.seconds = round(time.monotonic() - started, 2)
    code = process.poll()
    if code is not None:
        obs.exit_code = code
        obs.signal = signal.Signals(-code).name if code < 0 else f"exit {code}"
        records = wait_restart(server, before, RESTART_WAIT_S)
        failed = [r.error for r in records if not r.ok]
        if failed or not records:
            # The group's next server writes the same log: keep this one for the report.
            log = group.options.log_file
            kept = log.with_name(f"{log.stem}-{case.name}.log")
            with contextlib.suppress(OSError):
                shutil.copyfile(log, kept)
            obs.failed_restarts = [f"{error} (the log: {kept})" for error in failed]
        if not records or not records[-1].ok:
            error = obs.failed_restarts[-1] if failed else f"no restart (the log: {kept})"
            obs.problems.append(f"not restarted: {error}")
            group.close()
            return obs
        obs.back_after_s = round(records[-1].ready_s, 1)
    if code is None:
        now = {stub.instance: stub.pid for stub in server.stub_processes()}
        obs.stubs_died = sorted(i for i, pid in stubs.items() if now.get(i) != pid)
    checks = server.check_health()
    bad = [c for c in checks if not c.ok]
    obs.healthy = not bad
    obs.health_detail = "; ".join(f"{c.name}: {one_line(c.detail, 120)}" for c in bad)
    if case.check is not None and reply.ok:
        problem = case.check(reply)
        if problem:
            obs.problems.append(f"wrong answer: {problem}")
    return obs


def judge(expected: Outcome, obs: Observation) -> list[str]:
    """What in ``obs`` contradicts ``expected`` ([] = the stated outcome)."""
    problems = list(obs.problems)
    if expected.kind == DIES:
        want = signal.Signals(expected.signal).name
        if obs.signal != want:
            problems.append(f"expected the process to die by {want}, got: {obs.summary}")
        elif obs.back_after_s is None or not obs.healthy:
            problems.append(f"the launcher did not bring it back healthy: {obs.health_detail}")
        return problems
    if obs.signal:
        return [*problems, f"expected {expected.describe()}, but the process died ({obs.signal})"]
    if not obs.healthy:
        problems.append(f"server unhealthy afterwards: {obs.health_detail}")
    if obs.stubs_died:
        problems.append(f"Python-backend stubs died: {', '.join(obs.stubs_died)}")
    if expected.kind == STUB_DIES:
        problems = list(obs.problems)
        if obs.status not in expected.statuses:
            problems.append(f"expected {sorted(expected.statuses)}, got {obs.status}: {obs.text}")
        elif not re.search(expected.message, obs.text, re.IGNORECASE):
            problems.append(f"message does not match /{expected.message}/: {obs.text}")
        if not obs.stubs_died:
            problems.append("no Python-backend stub process died")
        return problems
    if expected.kind == SERVED and obs.status not in ("200", "StatusCode.OK"):
        problems.append(f"expected a result, got {obs.status}: {obs.text}")
    if expected.kind == REFUSED:
        if obs.status not in expected.statuses:
            problems.append(f"expected {sorted(expected.statuses)}, got {obs.status}: {obs.text}")
        elif not re.search(expected.message, obs.text, re.IGNORECASE):
            problems.append(f"message does not match /{expected.message}/: {obs.text}")
        elif not obs.text.strip():
            problems.append("refused without a message")
    return problems


def run_all(cases: list[Case], guarded: bool) -> dict[str, Observation]:
    """Every case, grouped by model set: the cases that keep the server alive first, then
    each dying case (each on the server the previous one left, or a fresh one)."""
    groups: dict[tuple[str, ...], list[Case]] = {}
    for case in cases:
        groups.setdefault(case.models, []).append(case)
    results: dict[str, Observation] = {}
    for models, members in groups.items():
        expected = (lambda c: c.guarded) if guarded else (lambda c: c.direct)
        members = sorted(members, key=lambda c: expected(c).kind in (DIES, STUB_DIES))
        group = ServerGroup(models, guarded)
        try:
            for case in members:
                try:
                    results[case.name] = run_case(group, case)
                    if results[case.name].healthy is False or results[case.name].stubs_died:
                        group.close()  # a fresh server for the next case
                except LaunchError as exc:
                    results[case.name] = Observation(problems=[f"no server to run it: {exc}"])
                    group.close()
        finally:
            group.close()
    return results


def guard_missing() -> str:
    """Why the guard cannot run here ("" = it can)."""
    try:
        from tritonrepo.server.http_guard import guard_available
    except ImportError as exc:
        return f"tritonrepo.server.http_guard is not importable ({exc})"
    return guard_available() or ""


HTTP_CASES = [c for c in CASES if c.guarded is not None]


@pytest.fixture(scope="module")
def results() -> Iterator[dict[str, dict[str, Observation]]]:
    """{"direct": {case: Observation}, "guarded": {...}}, filled on first use; written to
    build/hostile/ when the module ends."""
    require_artifacts()
    store: dict[str, dict[str, Observation]] = {}
    yield store
    write_report(store)


def _direct(results) -> dict[str, Observation]:
    if "direct" not in results:
        results["direct"] = run_all(CASES, guarded=False)
    return results["direct"]


def _guarded(results) -> dict[str, Observation]:
    if "guarded" not in results:
        results["guarded"] = run_all(HTTP_CASES, guarded=True)
    return results["guarded"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_direct_on_embedded_2_51(results, case: Case) -> None:
    """The case does on the embedded server what the catalogue states."""
    obs = _direct(results)[case.name]
    problems = judge(case.direct, obs)
    assert not problems, f"{case.name} ({case.source}): " + "; ".join(problems)


@pytest.mark.parametrize("case", HTTP_CASES, ids=lambda c: c.name)
def test_behind_the_guard(results, case: Case) -> None:
    """Behind the HTTP guard the case is refused (or served when harmless) and no case ends
    the process."""
    reason = guard_missing()
    if reason:
        pytest.fail(f"{reason} (make test installs the guard: make guard-deps)")
    obs = _guarded(results)[case.name]
    problems = judge(case.guarded, obs)
    assert not obs.signal, f"{case.name} ended the server behind the guard ({obs.signal})"
    assert not problems, f"{case.name} behind the guard: " + "; ".join(problems)


# --- report ---------------------------------------------------------------------------------
def protection(case: Case, guarded: Observation | None) -> str:
    """Who refused it (or that nothing did): from the catalogue and the observed replies."""
    if guarded is None or case.guarded is None:
        return case.protects + (
            " (gRPC: not behind the HTTP guard)" if case.guarded is None else ""
        )
    if guarded.text.startswith('{"error":"http guard:'):
        return f"the guard ({guarded.status}); direct: {case.protects}"
    if guarded.signal:
        return "nothing: it ended the server behind the guard"
    if case.direct.kind == DIES and case.guarded.kind == SERVED:
        return f"the guard ({case.guarded.note}); direct: {case.protects}"
    return case.protects


def write_report(store: dict[str, dict[str, Observation]]) -> None:
    """``results.json`` (every case, expected and observed) and ``report.md`` (the table)."""
    direct, guarded = store.get("direct", {}), store.get("guarded", {})
    if not direct and not guarded:
        return
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in CASES:
        d, g = direct.get(case.name), guarded.get(case.name)
        rows.append(
            {
                "case": case.name,
                "protocol": case.protocol,
                "models": list(case.models),
                "source": case.source,
                "fixed_in": case.fixed_in,
                "expected_direct": case.direct.describe(),
                "expected_guarded": case.guarded.describe() if case.guarded else None,
                "direct": asdict(d) if d else None,
                "direct_ok": not judge(case.direct, d) if d else None,
                "guarded": asdict(g) if g else None,
                "guarded_ok": (not judge(case.guarded, g)) if g and case.guarded else None,
            }
        )
    (OUT_DIR / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = [
        "| case | embedded 2.51 direct | behind the guard | what protects it | source (fixed in) |",
        "|---|---|---|---|---|",
    ]
    for case, row in zip(CASES, rows, strict=True):
        d, g = direct.get(case.name), guarded.get(case.name)
        direct_cell = d.summary if d else "not run"
        guard_cell = g.summary if g else "not run"
        if case.guarded is None:
            guard_cell = "n/a (gRPC)"
        mark = "" if row["direct_ok"] in (True, None) else " **(unexpected)**"
        fixed = f" ({case.fixed_in})" if case.fixed_in else ""
        lines.append(
            f"| `{case.name}` ({case.protocol}) | {direct_cell}{mark} | {guard_cell} | "
            f"{protection(case, g)} | {case.source}{fixed} |"
        )
    (OUT_DIR / "report.md").write_text("\n".join(lines) + "\n")


if (
    __name__ == "__main__"
):  # python -m tests.server.test_hostile [NAME-PART ...]: direct cases, printed
    wanted, guarded = sys.argv[1:], os.environ.get("HOSTILE_GUARDED") == "1"
    chosen = [
        c
        for c in (HTTP_CASES if guarded else CASES)
        if not wanted or any(w in c.name for w in wanted)
    ]
    observed = run_all(chosen, guarded=guarded)
    for case in chosen:
        o = observed[case.name]
        flag = "ok " if not judge(case.guarded if guarded else case.direct, o) else "BAD"
        print(flag, case.name, "|", o.summary, "|", o.seconds, "s |", o.text[:160])
