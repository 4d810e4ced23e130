"""Real English text of mixed length, for benchmarks, INT8 calibration and accuracy checks.

Nothing comes from a model hub: the text ships inside packages that ``requirements.txt`` pins,
so the same checkout yields the same texts on every machine.

* **Short** (queries, 3–20 words): the summary line of each docstring of numpy's public API
  (e.g. "Return the sum of array elements over a given axis.").
* **Medium** (one paragraph, 21–150 words): prose paragraphs of those docstrings and of the
  long descriptions (the PyPI README) of the pinned distributions in ``DESCRIPTION_SOURCES``.
* **Long** (151–900 words): consecutive prose paragraphs of one such description or docstring,
  joined. Most are longer than the encoder's 256 tokens and get truncated, as in production.

Code, tables, parameter lists, section headings and link-only lines are dropped; markdown and
reStructuredText markup is reduced to its words. A text belongs to the ``"calibration"`` split or
to the ``"eval"`` split by a hash of its content, so INT8 calibration never sees the texts its
accuracy is measured on. :func:`real_texts` draws a fixed mix (``MIX``) with a fixed seed.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from functools import lru_cache
from importlib import metadata

import numpy as np

# Pinned distributions (requirements.txt) whose long description is prose worth embedding.
DESCRIPTION_SOURCES = (
    "torch",
    "transformers",
    "sentence-transformers",
    "onnx",
    "onnxruntime",
    "tokenizers",
    "scikit-learn",
    "pytest",
    "numpy",
    "nvidia-pytriton",
)
# numpy modules whose public callables' docstrings are read (numpy is pinned).
DOCSTRING_MODULES = ("numpy", "numpy.linalg", "numpy.fft", "numpy.random", "numpy.ma")
# Share of each tier in a draw: mostly short queries and single paragraphs, some documents.
MIX = {"short": 0.4, "medium": 0.4, "long": 0.2}
WORDS = {"short": (3, 20), "medium": (21, 150), "long": (151, 900)}  # inclusive word counts
CALIBRATION_SHARE = 5  # one text in 5 (by content hash) is calibration data, the rest eval

_SECTION_UNDERLINE = re.compile(r"^\s*([-=~^*])\1{2,}\s*$")
_PARAMETER_LINE = re.compile(r"^\s*[*\w][\w, *]*\s:\s")  # numpydoc "axis : int, optional"
_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_RST_LINK = re.compile(r"`([^`<]+?)\s*<[^>]+>`_+")
_ROLE = re.compile(r":\w+:`~?([^`]+)`")
_MARKUP = re.compile(r"[`*_]{1,3}")
_URL = re.compile(r"https?://\S+")


def _clean(block: str) -> str:
    """A block of markdown/rST/numpydoc reduced to plain words on one line."""
    text = _MD_LINK.sub(r"\1", block)
    text = _RST_LINK.sub(r"\1", text)
    text = _ROLE.sub(r"\1", text)
    text = _URL.sub("", text)
    text = _MARKUP.sub("", text)
    return re.sub(r"\s+", " ", text).strip()


def _is_prose(block: str) -> bool:
    """True for a paragraph of sentences; False for code, tables, lists of names, headings."""
    lines = [ln for ln in block.splitlines() if ln.strip()]
    if not lines:
        return False
    first = lines[0].lstrip()
    if first.startswith(("```", ">>>", "...", "$ ", "|", "<", "#", "..", "+-", "pip ", "import ")):
        return False
    if any(_SECTION_UNDERLINE.match(ln) or _PARAMETER_LINE.match(ln) for ln in lines):
        return False
    words = _clean(block).split()
    if len(words) < 3:
        return False
    alphabetic = sum(1 for w in words if re.fullmatch(r"[A-Za-z][A-Za-z'’-]*[.,;:!?)]?", w))
    return alphabetic / len(words) >= 0.7 and _clean(block)[-1:] in ".!?:)"


def prose_paragraphs(text: str) -> list[str]:
    """The prose paragraphs of a docstring or README, in order, each on one line."""
    return [_clean(b) for b in re.split(r"\n\s*\n", text) if _is_prose(b)]


def _numpy_docstrings() -> list[str]:
    import importlib

    docs: dict[str, str] = {}
    for module_name in DOCSTRING_MODULES:
        module = importlib.import_module(module_name)
        for name in sorted(n for n in dir(module) if not n.startswith("_")):
            doc = inspect.getdoc(getattr(module, name, None))
            if doc and callable(getattr(module, name, None)):
                docs.setdefault(doc, f"{module_name}.{name}")
    return sorted(docs)


def _descriptions() -> list[str]:
    out = []
    for dist in DESCRIPTION_SOURCES:
        try:
            meta = metadata.metadata(dist)
        except metadata.PackageNotFoundError:
            continue
        out.append(meta.get_payload() or meta.get("Description") or "")  # type: ignore[attr-defined]
    return out


def _runs(paragraphs: list[str], low: int, high: int) -> list[str]:
    """Consecutive paragraphs joined until ``low`` words (never past ``high``), non-overlapping."""
    runs, current = [], []
    for paragraph in paragraphs:
        if sum(len(p.split()) for p in current) + len(paragraph.split()) > high:
            current = []
        current.append(paragraph)
        if sum(len(p.split()) for p in current) >= low:
            runs.append(" ".join(current))
            current = []
    return runs


@lru_cache(maxsize=1)
def text_pool() -> dict[str, tuple[str, ...]]:
    """Every available text by tier (``"short"``, ``"medium"``, ``"long"``), deduplicated and
    sorted, so the pool depends only on the installed (pinned) package versions."""
    tiers: dict[str, set[str]] = {tier: set() for tier in WORDS}
    documents = [(doc, True) for doc in _numpy_docstrings()]
    documents += [(desc, False) for desc in _descriptions()]
    for document, is_docstring in documents:
        paragraphs = prose_paragraphs(document)
        if is_docstring:
            summary = _clean(document.split("\n\n")[0])
            short_enough = WORDS["short"][0] <= len(summary.split()) <= WORDS["short"][1]
            if short_enough and summary.endswith((".", "?")):  # not a signature line
                tiers["short"].add(summary)
        for paragraph in paragraphs:
            if WORDS["medium"][0] <= len(paragraph.split()) <= WORDS["medium"][1]:
                tiers["medium"].add(paragraph)
        tiers["long"].update(_runs(paragraphs, *WORDS["long"]))
    return {tier: tuple(sorted(texts)) for tier, texts in tiers.items()}


def split_of(text: str) -> str:
    """``"calibration"`` or ``"eval"``, decided by the text's sha256 (stable across runs)."""
    digest = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")
    return "calibration" if digest % CALIBRATION_SHARE == 0 else "eval"


def real_texts(n: int, split: str = "eval", seed: int = 0) -> list[str]:
    """``n`` texts of ``split`` drawn with ``MIX`` (40 % short, 40 % medium, 20 % long).

    Texts repeat only when a tier of the split has fewer texts than asked for.

    Args:
        n: number of texts.
        split: ``"eval"`` (benchmarks, accuracy) or ``"calibration"`` (INT8 calibration).
        seed: numpy seed of the draw and of the shuffle that mixes the tiers.

    Returns:
        ``n`` strings in a shuffled order.

    Raises:
        ValueError: unknown split, or a tier of the split is empty (a pinned package is
            missing: run ``make setup``).
    """
    if split not in ("eval", "calibration"):
        raise ValueError(f"split must be 'eval' or 'calibration', got {split!r}")
    rng = np.random.default_rng(seed)
    texts: list[str] = []
    counts = {tier: round(n * share) for tier, share in MIX.items()}
    counts["short"] += n - sum(counts.values())
    for tier, count in counts.items():
        candidates = [t for t in text_pool()[tier] if split_of(t) == split]
        if not candidates:
            raise ValueError(
                f"no {tier} texts in the {split} split; are the pinned packages installed?"
            )
        picks = rng.choice(len(candidates), size=count, replace=count > len(candidates))
        texts += [candidates[i] for i in picks]
    return [texts[i] for i in rng.permutation(len(texts))]
