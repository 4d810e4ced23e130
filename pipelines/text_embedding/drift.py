"""text_embedding's drift reference: the calibration split of the text corpus
(``reference_data.text_corpus``: 40 % short, 40 % medium, 20 % long texts), the texts the INT8
encoder is calibrated on. Its features: :mod:`tritonrepo.text.drift`."""

import numpy as np

from reference_data.text_corpus import real_texts

REFERENCE_TEXTS = 2000


def reference() -> list[dict[str, np.ndarray]]:
    """One request of ``REFERENCE_TEXTS`` texts: ``TEXT`` BYTES ``[n, 1]``."""
    texts = real_texts(REFERENCE_TEXTS, split="calibration")
    return [{"TEXT": np.array([[t.encode("utf-8")] for t in texts], dtype=np.object_)}]
