"""A test whose tritonserver died under it runs once more, on the same server started again.

tritonserver 2.51 (the only server these tests can run) crashes now and then under load in ways
this repository's code does not cause and cannot prevent: ``Signal (11)`` in
``TRITONSERVER_ServerInferAsync`` while requests ran through an ensemble, a server gone during a
version reload under load (``docs/known_issues.md``). One such crash fails every test of the file
that shares the server. So, for a test that failed while a server it was given (a
:class:`~tritonrepo.server.launcher.TritonServer` argument, one held as ``.server`` by an
argument, or one it fetched at run time and named with :func:`watch`) died, and that server does
not restart itself (``restart_on_crash``):

* the failure's report gets a ``tritonserver died`` section: the exit, and the log from the
  crash signature on (the backtrace), so every crash stays in the output;
* the server is started again with the same command (its startup models, a fresh state);
* pytest-rerunfailures runs the test once more (``flaky(reruns=1)``, only under
  :func:`died_in_last_failure`): it passes only if it passes in full on the restarted server.

A failure without a dead server is not rerun, and a second death fails the test.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tritonrepo.server.launcher import LaunchError, TritonServer

# Where tritonserver's log shows what ended it: its handler of fatal signals prints
# "Signal (N) received." and the backtrace; an uncaught C++ exception prints "terminate called".
CRASH_SIGNATURES = ("Signal (", "terminate called")
RERUNS = 1
SECTION = "tritonserver died"


@dataclass(frozen=True)
class Death:
    """One server that died under a test: ``cause`` (the launcher's ``down_reason``) and
    ``excerpt`` (its log from the first crash signature on, at most 60 lines)."""

    cause: str
    excerpt: str

    def text(self) -> str:
        return f"{self.cause}\n{self.excerpt}".rstrip()


_deaths_of_last_failure: list[Death] = []
WATCHED = pytest.StashKey[list[TritonServer]]()


def watch(item: pytest.Item, server: TritonServer) -> None:
    """Count ``server`` among ``item``'s servers: one the test fetched at run time
    (``request.getfixturevalue``), which pytest does not list among the test's arguments
    (:func:`servers_of` drops repeats)."""
    item.stash.setdefault(WATCHED, []).append(server)


def servers_of(item: pytest.Item) -> list[TritonServer]:
    """The servers the test was given: its arguments that are one or hold one as ``.server``,
    and those it named with :func:`watch`."""
    found: list[TritonServer] = []
    values = [*getattr(item, "funcargs", {}).values(), *item.stash.get(WATCHED, [])]
    for value in values:
        for candidate in (value, getattr(value, "server", None)):
            if isinstance(candidate, TritonServer) and all(candidate is not s for s in found):
                found.append(candidate)
    return found


def crash_excerpt(log: str, max_lines: int = 60) -> str:
    """The lines of ``log`` from the first crash signature on (``""`` without one)."""
    lines = log.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if any(sig in line for sig in CRASH_SIGNATURES)),
        None,
    )
    return "" if start is None else "\n".join(lines[start : start + max_lines])


def died(server: TritonServer) -> Death | None:
    """A :class:`Death` when ``server``'s process ended without a stop and nothing restarts it;
    else None."""
    cause = server.down_reason()
    if cause is None or server.process is None:
        return None
    return Death(cause, crash_excerpt(server.process_log()))


def record_deaths(item: pytest.Item, report: pytest.TestReport) -> None:
    """For a failed setup or call: note the test's dead servers in the report and restart them
    (see the module docstring)."""
    if not report.failed or report.when == "teardown":
        return
    deaths = [(server, death) for server in servers_of(item) if (death := died(server))]
    _deaths_of_last_failure[:] = [death for _, death in deaths]
    for server, death in deaths:
        report.sections.append((SECTION, death.text()))
        try:
            server.respawn()
        except LaunchError as exc:
            report.sections.append((SECTION, f"and it did not start again: {exc}"))


def died_in_last_failure(error: BaseException | None = None) -> bool:
    """The rerun condition: a server of the test that just failed died under it."""
    return bool(_deaths_of_last_failure)


def rerun_marker() -> pytest.MarkDecorator:
    """``flaky(reruns=1, condition=died_in_last_failure)`` for pytest-rerunfailures."""
    return pytest.mark.flaky(reruns=RERUNS, condition=died_in_last_failure)


def summary_lines(reports: list[pytest.TestReport]) -> list[str]:
    """One line per rerun forced by a server's death, and the death's first lines."""
    lines: list[str] = []
    for report in reports:
        for name, text in report.sections:
            if name == SECTION:
                head = "\n    ".join(text.splitlines()[:4])
                lines.append(f"{report.nodeid}: {head}")
    return lines
