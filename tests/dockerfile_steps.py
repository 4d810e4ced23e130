"""Reading docker/Dockerfile* without a Docker engine: instructions, shell pipelines, the
``pip install`` steps, the files COPY puts in the image, and running a step as a
``pip install --dry-run`` for the image's Python (CPython 3.12, manylinux x86_64).

Used by tests/deploy/test_containers.py; tested there too.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tritonrepo.paths import REPO_ROOT

DOCKER_DIR = REPO_ROOT / "docker"
REQUIREMENTS = REPO_ROOT / "requirements.txt"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
ENTRYPOINT = DOCKER_DIR / "entrypoint.sh"

# The images' Python: NGC 26.05 (tritonserver and tensorrt) is Ubuntu 24.04, CPython 3.12.3,
# glibc 2.39, x86_64. Environment markers are evaluated for it (pip evaluates them for the
# Python running pip, hence a real 3.12 when there is one, and the rewrite in the stand-in).
TARGET_PYTHON = "3.12"
TARGET_MARKERS = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "implementation_version": "3.12.3",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}
TARGET_PLATFORMS = [
    *(f"manylinux_2_{minor}_x86_64" for minor in range(39, 16, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
]
PIP_INSTALL = re.compile(r"(?:^|[\s|(])(?:pip3?|python3?(?:\.\d+)?\s+-m\s+pip)\s+install\b")


# --- Dockerfiles -------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction: keyword (upper case), arguments, first line number."""

    keyword: str
    args: str
    line: int


@dataclass
class PipStep:
    """A shell pipeline of a RUN instruction that runs ``pip install``, with the image state
    it runs in: working directory, shell and the files COPY put in the image so far."""

    dockerfile: Path
    line: int
    pipeline: str
    workdir: str
    shell: list[str]
    copies: list[tuple[list[str], str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        """``Dockerfile.builder:17``-style id."""
        return f"{self.dockerfile.name}:{self.line}"


def dockerfiles() -> list[Path]:
    """Every Dockerfile under docker/ (``Dockerfile``, ``Dockerfile.<name>``)."""
    return sorted(p for p in DOCKER_DIR.rglob("Dockerfile*") if p.is_file())


def parse_dockerfile(path: Path) -> list[Instruction]:
    """Instructions of ``path``: comment lines dropped (also inside a continuation, as Docker
    does), backslash continuations joined."""
    instructions: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not parts:
            start = number
        if stripped.endswith("\\"):
            parts.append(stripped[:-1].strip())
            continue
        parts.append(stripped)
        keyword, _, args = " ".join(parts).partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
        parts = []
    return instructions


def shell_lists(command: str) -> list[str]:
    """``command`` split at ``&&``, ``||``, ``;`` and newlines outside quotes: its pipelines."""
    pieces, current, quote, i = [], [], "", 0
    while i < len(command):
        ch = command[i]
        if quote:
            current.append(ch)
            if ch == "\\" and quote == '"' and i + 1 < len(command):
                current.append(command[i + 1])
                i += 1
            elif ch == quote:
                quote = ""
        elif ch == "\\" and i + 1 < len(command):
            current.append(command[i : i + 2])
            i += 1
        elif ch in "'\"":
            quote = ch
            current.append(ch)
        elif command.startswith(("&&", "||"), i) or ch in ";\n":
            pieces.append("".join(current).strip())
            current = []
            i += 1 if ch in ";\n" else 2
            continue
        else:
            current.append(ch)
        i += 1
    pieces.append("".join(current).strip())
    return [p for p in pieces if p]


def _copy_args(args: str) -> tuple[list[str], str] | None:
    """``(sources, destination)`` of a COPY/ADD from the build context; ``None`` for
    ``--from`` (another stage or image)."""
    words = json.loads(args) if args.startswith("[") else shlex.split(args)
    flags = [w for w in words if w.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        return None
    paths = [w for w in words if not w.startswith("--")]
    return paths[:-1], paths[-1]


def pip_steps(path: Path) -> list[PipStep]:
    """Every shell pipeline that runs ``pip install`` in the Dockerfile ``path``."""
    steps: list[PipStep] = []
    workdir, shell, copies = "/", ["/bin/sh", "-c"], []
    for ins in parse_dockerfile(path):
        if ins.keyword == "FROM":
            workdir, copies = "/", []
        elif ins.keyword == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, ins.args))
        elif ins.keyword == "SHELL":
            shell = json.loads(ins.args)
        elif ins.keyword in ("COPY", "ADD"):
            copy = _copy_args(ins.args)
            if copy:
                sources, dest = copy
                trailing = "/" if dest.endswith("/") else ""
                dest = posixpath.normpath(posixpath.join(workdir, dest)) + trailing
                copies.append((sources, dest))
        elif ins.keyword == "RUN":
            command = re.sub(r"^(--(mount|network|security)=\S+\s+)+", "", ins.args)
            if command.startswith("["):
                command = shlex.join(json.loads(command))
            for pipeline in shell_lists(command):
                if PIP_INSTALL.search(pipeline):
                    steps.append(PipStep(path, ins.line, pipeline, workdir, shell, list(copies)))
    return steps


def lay_out_image(step: PipStep, root: Path) -> Path:
    """Lay the files COPY put in the image before ``step`` under ``root`` (symbolic links
    into this checkout, the build context); returns the step's working directory there."""
    for sources, dest in step.copies:
        for source in sources:
            for src in sorted(REPO_ROOT.glob(source)) or [REPO_ROOT / source]:
                assert src.exists(), f"{step.dockerfile.name}: COPY source {source} is missing"
                into_dir = dest.endswith("/") or len(sources) > 1 or src.is_dir()
                target = root / dest.strip("/")
                if into_dir and src.is_file():
                    target = target / src.name
                target.parent.mkdir(parents=True, exist_ok=True)
                if src.is_dir() and target.is_dir():  # contents into an existing folder
                    for child in src.iterdir():
                        (target / child.name).symlink_to(child)
                elif not target.exists():
                    target.symlink_to(src)
    cwd = root / step.workdir.strip("/")
    cwd.mkdir(parents=True, exist_ok=True)
    return cwd


# --- pip for the image's Python ---------------------------------------------------------------


def target_python() -> str:
    """A CPython ``TARGET_PYTHON`` with pip on this machine (pyenv's, when installed), else this
    Python: pip then evaluates the environment markers of dependencies for this Python instead."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    exe = f"python{TARGET_PYTHON}"
    candidates = [shutil.which(exe), *sorted(pyenv.glob(f"versions/{TARGET_PYTHON}*/bin/{exe}"))]
    probe_code = "import sys, pip; print('%d.%d.' % sys.version_info[:2])"
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [str(candidate), "-c", probe_code],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if probe.stdout.strip() == f"{TARGET_PYTHON}.":
            return str(candidate)
    return sys.executable


# Stands for pip, pip3, python and python3 in a step's pipeline: `pip install ARGS` becomes a
# dry run for the image's Python with a JSON report; requirement files and arguments get their
# environment markers evaluated for that Python; any other use of python runs the real one.
PIP_STAND_IN = '''\
import json, os, sys, tempfile
from packaging.requirements import Requirement

CONFIG = json.loads({config!r})
name = os.path.basename(sys.argv[0])
args = sys.argv[1:]
if name.startswith("python"):
    if args[:2] != ["-m", "pip"]:
        os.execv(CONFIG["real_python"], [CONFIG["real_python"], *args])
    args = args[2:]
if args[:1] != ["install"]:
    sys.exit(f"{{name}} {{' '.join(args)}}: only `pip install` is resolved by this test")


def for_target(line):
    """The requirement ``line`` for the image's Python, or None where its marker excludes it."""
    req = Requirement(line)
    if req.marker and not req.marker.evaluate(CONFIG["markers"]):
        return None
    req.marker = None
    return str(req)


def evaluated_file(path):
    """A copy of the requirements file ``path`` with its markers evaluated."""
    lines = []
    with open(path) as f:
        for raw in f:
            line = raw.split(" #")[0].strip()
            if line and not line.startswith(("#", "-")):
                line = for_target(line)
            if line:
                lines.append(line)
    fd, out = tempfile.mkstemp(suffix=".txt", dir=CONFIG["work"])
    with os.fdopen(fd, "w") as f:
        f.write("\\n".join(lines) + "\\n")
    return out


out, rest = [], args[1:]
while rest:
    arg = rest.pop(0)
    if arg == "--no-cache-dir":  # the image saves space; here the cache saves time
        continue
    for opt in ("-c", "--constraint", "-r", "--requirement"):
        if arg == opt:
            out += [opt, evaluated_file(rest.pop(0))]
            break
        if arg.startswith(opt + "=") or (len(opt) == 2 and arg.startswith(opt) and arg != opt):
            out += [opt, evaluated_file(arg[len(opt) :].lstrip("="))]
            break
    else:
        if ";" in arg and not arg.startswith("-"):
            arg = for_target(arg)
        if arg:
            out.append(arg)
target = tempfile.mkdtemp(dir=CONFIG["work"])
fd, report = tempfile.mkstemp(suffix=".json", dir=CONFIG["reports"])
os.close(fd)
cmd = [CONFIG["pip_python"], "-m", "pip", "install", "--dry-run", "--target", target,
       "--report", report, "--quiet", *CONFIG["flags"], *out]
os.execv(cmd[0], cmd)
'''


@dataclass
class Resolution:
    """A step's dry run: pip's exit status and messages, and its installation reports."""

    returncode: int
    stderr: str
    reports: list[dict]


def run_pip_step(step: PipStep, tmp: Path) -> Resolution:
    """Run ``step``'s pipeline with its shell in the laid-out image, pip standing for a dry run
    for the image's Python."""
    bin_dir, work, reports = tmp / "bin", tmp / "work", tmp / "reports"
    for d in (bin_dir, work, reports):
        d.mkdir(parents=True)
    config = {
        "real_python": sys.executable,
        "pip_python": target_python(),
        "markers": TARGET_MARKERS,
        "work": str(work),
        "reports": str(reports),
        "flags": [
            f"--python-version={TARGET_PYTHON}",
            "--implementation=cp",
            "--only-binary=:all:",
            *(f"--platform={p}" for p in TARGET_PLATFORMS),
        ],
    }
    script = f"#!{sys.executable}\n" + PIP_STAND_IN.format(config=json.dumps(config))
    for name in ("pip", "pip3", "python", "python3"):
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    cwd = lay_out_image(step, tmp / "image")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PIP_REQUIRE_VIRTUALENV", None)
    proc = subprocess.run(
        [*step.shell, step.pipeline], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    found = [json.loads(p.read_text()) for p in sorted(reports.iterdir()) if p.stat().st_size]
    return Resolution(proc.returncode, proc.stderr, found)


def pip_messages(stderr: str) -> str:
    """pip's stderr without its notes about unreachable ``file://`` extra indexes."""
    keep = [line for line in stderr.splitlines() if "is ignored: it is neither" not in line]
    return "\n".join(keep).strip()


def pinned_versions() -> dict[str, str]:
    """``{canonical name: version}`` of every ``==`` pin of requirements.txt that applies to the
    images' Python (``# no-deps: name==version`` lines included: `make setup` installs those
    without their dependencies)."""
    pins: dict[str, str] = {}
    for raw in REQUIREMENTS.read_text().splitlines():
        raw = raw.removeprefix("# no-deps:")  # a pin installed without its dependencies
        line = raw.split("#")[0].strip()
        if not line:
            continue
        req = Requirement(line)
        if req.marker and not req.marker.evaluate(TARGET_MARKERS):
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            pins[canonicalize_name(req.name)] = exact[0]
    return pins


def pip_arguments(pipeline: str) -> list[str]:
    """The arguments after ``install`` of the pip command in ``pipeline``."""
    lexer = shlex.shlex(pipeline, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    for i in range(len(words) - 1):
        if words[i + 1] == "install" and re.fullmatch(r"pip3?", words[i]):
            start = i + 2
        elif words[i : i + 3] == ["-m", "pip", "install"]:
            start = i + 3
        else:
            continue
        end = next((j for j in range(start, len(words)) if words[j][0] in "|&;<>()"), None)
        return words[start:end]
    raise AssertionError(f"no pip install in {pipeline!r}")


# pip options that take a value (the value is not a requirement).
VALUE_OPTIONS = {
    "-c", "--constraint", "-r", "--requirement", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--platform",
}  # fmt: skip


def local_projects(args: list[str]) -> list[str]:
    """Arguments of a pip command that are local project folders (``.``, ``./x``, ``/x``)."""
    projects, words = [], iter(args)
    for arg in words:
        if arg in VALUE_OPTIONS:
            next(words, None)
        elif arg.startswith((".", "/")):
            projects.append(arg)
    return projects
