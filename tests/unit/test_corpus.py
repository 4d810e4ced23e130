"""The real-text set: from pinned packages, deterministic, mixed in length, splits disjoint."""

from __future__ import annotations

from collections import Counter

from reference_data import text_corpus as corpus


def test_pool_has_every_tier_with_enough_texts():
    pool = corpus.text_pool()
    assert {tier: len(texts) >= 50 for tier, texts in pool.items()} == dict.fromkeys(
        corpus.WORDS, True
    )
    for tier, texts in pool.items():
        low, high = corpus.WORDS[tier]
        assert all(low <= len(t.split()) <= high for t in texts), tier


def test_texts_are_prose_not_code_or_markup():
    for texts in corpus.text_pool().values():
        for text in texts:
            assert ">>>" not in text and "```" not in text and "](http" not in text, text


def test_draw_is_deterministic_and_mixed():
    first, again = corpus.real_texts(200), corpus.real_texts(200)
    assert first == again
    assert corpus.real_texts(200, seed=1) != first
    pool = {t: tier for tier, texts in corpus.text_pool().items() for t in texts}
    shares = Counter(pool[t] for t in first)
    assert shares == {"short": 80, "medium": 80, "long": 40}


def test_calibration_and_eval_splits_are_disjoint():
    calibration = set(corpus.real_texts(300, split="calibration"))
    evaluation = set(corpus.real_texts(300, split="eval"))
    assert calibration and evaluation and not calibration & evaluation
    assert {corpus.split_of(t) for t in calibration} == {"calibration"}
