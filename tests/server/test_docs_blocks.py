"""Every bash, console and python block of README.md and docs/**/*.md, run in document order
against one real server, with the shown outputs compared (conventions:
docs/contributing/doc_blocks.md; parser and comparison: tests/doc_blocks.py).

The server is what ``make serve`` runs: the launcher with its default models and ports
(HTTP 8000, gRPC 8001, metrics 8002, the supervisor's metrics 8003), so the blocks run
verbatim. It is started once, by the first block that runs, and every block after it finds
the state the blocks before it left; after each block the server must still serve every
model (a real inference each). The blocks run in a copy of the checkout (tracked and
untracked files; ``.venv`` and ``build`` linked; ``model_repository`` a folder of links to the
tree's model folders, which the server serves), so files they write, new model folders
included, do not land in the tree, with ``PATH`` as a user has it (no ``.venv/bin``),
``PYTHONPATH`` the copy (the console scripts import its code, not the tree's) and the server's
repository key in ``$TRITONREPO_REPOSITORY_KEY``.

A block marked ``own-server MODEL`` changes what the shared server serves (it builds a version
into the repository and rolls it out): it runs after every other block, in a copy of its own
whose ``model_repository`` holds copies of the folders ``MODEL*`` (the pipeline's models), on a
server of its own serving MODEL on the same default ports (the shared server stopped first).
The blocks after it on the same page that name the same model run on that server too.

On a machine where something else holds those ports, run it in a network namespace of its own
(root): ``unshare -n sh -c 'ip link set lo up && .venv/bin/python -m pytest
tests/server/test_docs_blocks.py'``.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import server_crashes
from tests.doc_blocks import Block, compare_output, parse_file, parse_markdown
from tritonrepo.paths import BUILD_DIR, REPO_ROOT
from tritonrepo.server.launcher import LaunchError, ServerOptions, TritonServer

DOC_FILES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
LINKED = (".venv", "build")  # large or built: linked, not copied
LINKED_ENTRIES = ("model_repository",)  # a folder of links: new entries stay in the copy


def collect_blocks() -> list[Block]:
    """The runnable blocks of every doc file, README first, then docs/ in path order; the
    ``own-server`` blocks after all the others, in the same order."""
    blocks = [b for path in DOC_FILES for b in parse_file(path, REPO_ROOT)]
    return [b for b in blocks if not b.own_server] + [b for b in blocks if b.own_server]


BLOCKS = collect_blocks()


# --- the input files blocks name with <!-- doc-test: files ... --> ---------------------------


def _texts(count: int) -> list[str]:
    from tests.sentences import SENTENCES

    return [SENTENCES[i % len(SENTENCES)] for i in range(count)]


def _texts_file(path: Path) -> None:
    """texts.txt: 1000 lines, the test sentences in turn (one per line)."""
    path.write_text("".join(f"{t.replace(chr(10), ' ')}\n" for t in _texts(1000)))


def _bad_file(path: Path) -> None:
    """bad.txt: like texts.txt, but line 501 is not UTF-8 (byte 0xff at offset 4)."""
    lines = [f"{t.replace(chr(10), ' ')}".encode() for t in _texts(1000)]
    lines[500] = b"line\xff 501"
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def _photo(name: str):
    def make(path: Path) -> None:
        from reference_data.photos import photo_file

        path.write_bytes(photo_file(name))

    make.__doc__ = f"scikit-image's {name!r} photo as a JPEG (quality 95)."
    return make


def _broken_png(path: Path) -> None:
    """broken.png: the first 30 bytes of a PNG (the header chunk cut short)."""
    from reference_data.photos import encode, photo_array

    path.write_bytes(encode(photo_array("coffee"), "PNG")[:30])


INPUT_FILES = {
    "texts.txt": _texts_file,
    "bad.txt": _bad_file,
    "cat.jpg": _photo("chelsea"),
    "coffee.jpg": _photo("coffee"),
    "broken.png": _broken_png,
}


# --- fixtures -------------------------------------------------------------------------------


def copy_checkout(work: Path, copied: str | None = None) -> Path:
    """``work``: a copy of the checkout for blocks to run in (mtimes kept, so make sees what is
    up to date as in the tree); the built and large folders are links to the tree's, and so
    are the model folders, but those matching the glob ``copied``, which are copied (first
    versions only, as the build leaves them)."""
    work.mkdir(parents=True, exist_ok=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in listed:
        if not name or name.split("/", 1)[0] in (*LINKED, *LINKED_ENTRIES):
            continue
        source, target = REPO_ROOT / name, work / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    for name in LINKED:
        if (REPO_ROOT / name).exists():
            (work / name).symlink_to(REPO_ROOT / name)
    for name in LINKED_ENTRIES:  # a page may generate a model folder (add_your_own_model.md)
        (work / name).mkdir()
        for entry in sorted((REPO_ROOT / name).iterdir()):
            if copied and entry.match(copied):
                shutil.copytree(entry, work / name / entry.name, symlinks=True,
                                ignore=shutil.ignore_patterns("__pycache__", "[2-9]"))  # fmt: skip
            else:
                (work / name / entry.name).symlink_to(entry)
    # The blocks run with the venv as it is. A block's `make` must not reinstall it from the
    # copy: pip's editable install would then point at a folder pytest deletes later.
    # (Nanoseconds, and a second older than the stamp: a float mtime set back can round up past
    # the stamp's, and make then reinstalls.)
    stamp = REPO_ROOT / ".venv" / ".installed"
    if stamp.is_file():
        installed_ns = stamp.stat().st_mtime_ns
        older_ns = installed_ns - 1_000_000_000
        for name in ("requirements.txt", "pyproject.toml"):
            if (work / name).stat().st_mtime_ns >= installed_ns:
                warnings.warn(f"{name} is newer than .venv: run `make setup`", stacklevel=1)
                os.utime(work / name, ns=(older_ns, older_ns))
    return work


@pytest.fixture(scope="session")
def docs_workdir(tmp_path_factory) -> Path:
    """The shared server's copy of the checkout (:func:`copy_checkout`, model folders linked)."""
    return copy_checkout(tmp_path_factory.mktemp("docs-checkout"))


SHARED: list[TritonServer] = []  # the shared server once started: own-server blocks stop it


@pytest.fixture(scope="session")
def docs_server(docs_workdir: Path) -> Iterator[TritonServer]:
    """The server of ``make serve``: default models and ports, the self-healing supervisor,
    a repository key of its own; it serves the copy's ``model_repository`` (the tree's model
    folders, linked, and those the blocks generate)."""
    from tests.conftest import require_artifacts

    require_artifacts()
    options = ServerOptions(
        model_repository=docs_workdir / "model_repository",
        log_file=BUILD_DIR / "test-logs" / "docs-blocks.log",
        repository_key=secrets.token_urlsafe(16),
        heal_interval_s=10.0,
        http_guard=True,  # as make serve runs it
        heal_metrics_port=8003,
        startup_timeout_s=600.0,
    )
    server = TritonServer(options)
    start_on_default_ports(server)
    SHARED.append(server)
    try:
        yield server
    finally:
        server.stop()


def start_on_default_ports(server: TritonServer) -> None:
    """Start ``server``; fail the test with the way out when the default ports are taken."""
    try:
        server.start()
    except LaunchError as exc:
        pytest.fail(
            f"the doc blocks need the server of `make serve` on its default ports: {exc} "
            "(elsewhere on a shared machine: unshare -n sh -c 'ip link set lo up && "
            ".venv/bin/python -m pytest tests/server/test_docs_blocks.py')"
        )


class OwnServers:
    """The server and copy of the ``own-server`` blocks running now (one at a time, on the
    default ports), keyed by page and model; :meth:`get` replaces them when the key changes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.key: tuple[Path, str] | None = None
        self.server: TritonServer | None = None
        self.cwd: Path | None = None

    def get(self, block: Block) -> tuple[TritonServer, Path]:
        """The server and copy for ``block`` (started with the first block of its key; the
        shared server and the previous key's are stopped first: they hold the same ports)."""
        key = (block.path, block.own_server or "")
        if key != self.key or self.server is None or self.cwd is None:
            self.close()
            for shared in SHARED:
                shared.stop()
            model = block.own_server or ""
            work = self.root / f"{len(list(self.root.iterdir()))}-{model}"
            copy_checkout(work, copied=f"{model}*")
            options = ServerOptions(
                model_repository=work / "model_repository",
                models=(model,),
                log_file=BUILD_DIR / "test-logs" / f"docs-blocks-{model}.log",
                repository_key=secrets.token_urlsafe(16),
                http_guard=True,
                exit_timeout_s=5,
            )
            self.key, self.server, self.cwd = key, TritonServer(options), work
            start_on_default_ports(self.server)
        return self.server, self.cwd

    def close(self) -> None:
        """Stop the running server, if any."""
        if self.server is not None:
            self.server.stop()
        self.key = self.server = self.cwd = None


@pytest.fixture(scope="session")
def own_servers(tmp_path_factory) -> Iterator[OwnServers]:
    """The own-server blocks' servers, stopped at the end of the session."""
    servers = OwnServers(tmp_path_factory.mktemp("docs-own"))
    try:
        yield servers
    finally:
        servers.close()


def block_environment(server: TritonServer, cwd: Path) -> dict[str, str]:
    """A user's shell: ``PATH`` without this checkout's ``.venv/bin`` (the docs write
    ``.venv/bin/...``), no make or venv variables of the caller, the server's key, unbuffered
    Python (stdout and stderr interleave as on a terminal) and an 80-column terminal;
    ``PYTHONPATH`` is ``cwd``, the copy: the venv's console scripts (an editable install of the
    tree) then import the copy's code and write into the copy, as they would in a checkout."""
    venv = (REPO_ROOT / ".venv").resolve()
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and venv not in Path(p).parents
        and Path(p).resolve() != venv / "bin"
    )  # fmt: skip
    env["TRITONREPO_REPOSITORY_KEY"] = server.options.repository_key or ""
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "80"
    env["PYTHONPATH"] = str(cwd)
    return env


# --- running ----------------------------------------------------------------------------------


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float) -> tuple[int, str]:
    """Run ``argv``; (exit status, stdout and stderr interleaved). Past ``timeout_s`` seconds
    its whole process group is killed and the status is -9."""
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return -9, out.decode(errors="replace") + f"\n[killed after {timeout_s:g} s]"
    return proc.returncode, out.decode(errors="replace")


# make targets a block may run here: they act on the running server or only check files. The
# others build or install into the shared checkout (artifacts, setup), run the suite, or serve
# until stopped; `make serve` is this runner's fixture.
MAKE_TARGETS_RUN = {"help", "fallback-cpu", "fallback-gpu", "k8s-validate", "lint"}
MAKE_WORD = re.compile(r"(?:^|[;&|(`]|\$\()\s*make\b([^;&|)#\n]*)", re.MULTILINE)


def shell_text(block: Block) -> str:
    """What a block gives the shell: a bash block's text, a console block's commands (without
    their ``$ `` and output), nothing for a python block."""
    if block.kind == "console":
        return "\n".join(c.text for c in block.commands())
    return block.source if block.kind == "bash" else ""


MAKE_TARGETS_OWN = {"version"}  # also in an own-server block: it builds into the block's copy


def unsafe_make(source: str, own_server: bool = False) -> list[str]:
    """The ``make`` targets in a shell block that are not in :data:`MAKE_TARGETS_RUN` (nor in
    :data:`MAKE_TARGETS_OWN` for an ``own-server`` block; ``make`` alone runs ``help``, the
    Makefile's first target)."""
    allowed = MAKE_TARGETS_RUN | (MAKE_TARGETS_OWN if own_server else set())
    found = []
    for args in MAKE_WORD.findall(source.replace("\\\n", " ")):
        words = [w for w in args.split() if not w.startswith("-") and "=" not in w]
        found += [w for w in words if w not in allowed]
    return found


def shows_error(shown: str | None) -> bool:
    """Whether shown output has an ``error:`` line: the command is expected to fail."""
    return bool(shown) and any(ln.lstrip().startswith("error:") for ln in shown.splitlines())


def check_step(where: str, what: str, status: int, output: str, shown: str | None,
               approx: bool) -> str | None:  # fmt: skip
    """Why one command or block did not do what the doc shows, or None."""
    expect_failure = shows_error(shown)
    if status == -9 or (status == 0) == expect_failure:
        want = "to fail (its shown output has an error: line)" if expect_failure else "exit 0"
        return f"{where}: {what}\nexpected {want}, got exit status {status}; it printed:\n{output}"
    if shown is not None:
        why = compare_output(shown, output, approx)
        if why:
            return f"{where}: {what}\n{why}"
    return None


def run_block(block: Block, cwd: Path, env: dict[str, str]) -> str | None:
    """Run one block; why it failed, or None."""
    if block.kind == "console":
        for command in block.commands():
            status, output = run(
                ["bash", "-o", "pipefail", "-c", command.text], cwd, env, block.timeout_s
            )
            why = check_step(
                f"{block.path}:{command.line}", f"$ {command.text}", status, output,
                command.shown, block.approx,
            )  # fmt: skip
            if why:
                return why
        return None
    if block.kind == "bash":
        argv = ["bash", "-e", "-o", "pipefail", "-c", block.source]
    else:
        script = cwd / f"doc_block_{block.path.stem}_{block.line}.py"
        script.write_text(block.source)
        argv = [sys.executable, script.name]
    status, output = run(argv, cwd, env, block.timeout_s)
    return check_step(block.where, block.source, status, output, block.shown, block.approx)


@pytest.mark.server
@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.where}:{b.kind}" for b in BLOCKS])
def test_doc_block(block: Block, request) -> None:
    """The block runs as the doc says: exit status, and the shown output where there is one."""
    if block.problem:
        pytest.fail(block.problem, pytrace=False)
    if block.skip:
        pytest.skip(f"{block.where}: {block.skip}")
    unknown = [name for name in block.files if name not in INPUT_FILES]
    if unknown:
        pytest.fail(
            f"{block.where}: no input file {unknown} in "
            "tests/server/test_docs_blocks.py INPUT_FILES "
            f"(known: {', '.join(INPUT_FILES)})",
            pytrace=False,
        )
    unsafe = unsafe_make(shell_text(block), bool(block.own_server))
    if unsafe:
        pytest.fail(
            f"{block.where}: runs `make {' '.join(unsafe)}`, which the doc "
            "runner does not run (it builds or installs into the shared checkout, runs the test "
            "suite, or serves until stopped; the runner's own server stands for `make serve`): "
            "mark the block <!-- doc-test: skip (why) -->",
            pytrace=False,
        )
    if block.own_server:
        server, cwd = request.getfixturevalue("own_servers").get(block)
    else:
        server = request.getfixturevalue("docs_server")
        cwd = request.getfixturevalue("docs_workdir")
        if server.process is None:
            pytest.fail(f"{block.where}: runs after an own-server block stopped the shared "
                        "server (collect_blocks orders those last)", pytrace=False)  # fmt: skip
    server_crashes.watch(request.node, server)  # a crash of 2.51 under it: restarted, rerun
    for name in block.files:
        if not (cwd / name).exists():
            INPUT_FILES[name](cwd / name)
    started = time.monotonic()
    why = run_block(block, cwd, block_environment(server, cwd))
    elapsed = time.monotonic() - started
    if why:
        pytest.fail(f"{why}\n[{elapsed:.1f} s]", pytrace=False)
    broken = [c for c in server.check_health() if not c.ok]
    if broken:
        pytest.fail(
            f"{block.where}: the block left the server unable to serve, so the next blocks "
            f"would not find what the doc expects: "
            + "; ".join(f"{c.name}: {c.detail}" for c in broken),
            pytrace=False,
        )


# --- the conventions themselves (no server) ---------------------------------------------------


def test_output_comparison_rules() -> None:
    """``...`` in a line and as a line, numbers by shown precision, integers exact."""
    shown = "a [-0.1458, -0.017, ...]\n...\nend 0.3833 of 4"
    assert compare_output(shown, "a [-0.14583, -0.0171, 9]\nx\ny\nend 0.38325953 of 4") is None
    assert compare_output(shown, "a [-0.1458, -0.017, 5]\nend 0.3833 of 4") is None
    assert "0.3833 shown, 0.3850" in compare_output(
        shown, "a [-0.1458, -0.017, 5]\nend 0.3850 of 4"
    )
    assert "4 shown, 5" in compare_output(shown, "a [-0.1458, -0.017, 5]\nend 0.3833 of 5")
    assert "differs" in compare_output("one\ntwo", "one\nthree")
    assert compare_output("2.7e-05 (1.3 s)", "2.66e-05 (1.3 s)") is None
    assert compare_output("in 2.9 s, 3 models", "in 11.4 s, 3 models", approx=True) is None
    assert compare_output("in 2.9 s, 3 models", "in 11.4 s, 4 models", approx=True)
    full = "[0.3832685351371765]"
    assert compare_output(full, "[0.38326865]") is None
    assert compare_output(full, "[0.3833]") is not None


def test_markers_and_blocks() -> None:
    """Markers attach to the block right below them, also in a list; console commands and a
    ```text output are split out; a broken marker or block becomes that block's problem."""
    doc = "\n".join(
        [
            "<!-- doc-test: skip (needs a GPU; and Docker) -->",
            "```bash",
            "make serve",
            "```",
            "- item",
            "",
            "  <!-- doc-test: files cat.jpg; output-approx; timeout 20 -->",
            "  ```console",
            "  $ echo a \\",
            "      b",
            "  a b",
            "  $ true",
            "  ```",
            "```python",
            "print(1)",
            "```",
            "```text",
            "1",
            "```",
            "<!-- doc-test: sikp (typo) -->",
            "```bash",
            "true",
            "```",
            "<!-- doc-test: own-server breast_cancer; output-approx -->",
            "```console",
            "$ make version NAME=breast_cancer VERSION=2",
            "```",
            "<!-- doc-test: output-approx -->",
            "",
            "A paragraph between.",
            "",
            "```console",
            "output first",
            "```",
            "```yaml",
            "a: 1",
            "```",
        ]
    )
    blocks = parse_markdown(doc, Path("page.md"))
    gpu, console, python, typo, own, stray, bad_console = blocks
    assert gpu.skip == "needs a GPU; and Docker" and gpu.line == 2
    assert console.files == ["cat.jpg"] and console.approx and console.timeout_s == 20
    commands = console.commands()
    assert [c.text for c in commands] == ["echo a \\\n    b", "true"]
    assert commands[0].shown == "a b\n" and commands[1].shown is None
    assert commands[0].line == 9
    assert python.kind == "python" and python.shown == "1\n"
    assert "unknown doc-test item 'sikp (typo)'" in typo.problem
    assert own.own_server == "breast_cancer" and own.approx and console.own_server is None
    assert unsafe_make(shell_text(own), own_server=True) == []
    assert unsafe_make(shell_text(own)) == ["version"] and shell_text(python) == ""
    assert stray.kind == "marker" and stray.problem.startswith("page.md:28:")
    assert "starts with '$ ' commands" in bad_console.problem
