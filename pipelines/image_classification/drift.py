"""image_classification's drift reference: JPEG files made from the bundled photos by random
crops, flips and brightness/contrast changes (``reference_data.photos.augmented_files``, the
recipe of the INT8 calibration images). Its features: :mod:`tritonrepo.image.drift`."""

import numpy as np

from reference_data.photos import augmented_files

REFERENCE_IMAGES = 256
REFERENCE_SEED = 11


def reference() -> list[dict[str, np.ndarray]]:
    """One request per image: ``IMAGE`` BYTES ``[1, 1]``."""
    files = augmented_files(REFERENCE_IMAGES, REFERENCE_SEED)
    return [{"IMAGE": np.array([[f]], dtype=np.object_)} for f in files]
