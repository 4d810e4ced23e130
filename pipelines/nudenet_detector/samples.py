"""Sample requests: scikit-image's bundled photographs, encoded as JPEG or PNG."""

import cv2
import numpy as np
import skimage.data as data


def _faces() -> np.ndarray:
    """The astronaut and the cameraman side by side: two faces in one image."""
    return np.hstack(
        [data.astronaut()[:300, 100:400], np.dstack([data.camera()[:300, 150:450]] * 3)]
    )


# (image, format): RGB, gray and RGBA; landscape, square and portrait; JPEG and PNG.
PHOTOS = [
    (data.astronaut, ".jpg"),
    (data.coffee, ".jpg"),
    (data.chelsea, ".png"),
    (data.rocket, ".jpg"),
    (data.camera, ".png"),
    (data.logo, ".png"),
    (data.coins, ".jpg"),
    (data.hubble_deep_field, ".jpg"),
    (lambda: np.rot90(data.stereo_motorcycle()[0]), ".jpg"),
    (lambda: data.astronaut()[:, 100:400], ".png"),
    (_faces, ".jpg"),
    (lambda: cv2.resize(data.astronaut(), (160, 160), interpolation=cv2.INTER_AREA), ".jpg"),
]
TO_BGR = {3: cv2.COLOR_RGB2BGR, 4: cv2.COLOR_RGBA2BGRA}


def samples() -> dict[str, np.ndarray]:
    """``IMAGE`` object [12, 1] of encoded photos (``bytes``), 160 to 1000 pixels a side."""
    rows = []
    for load, ext in PHOTOS:
        rgb = np.ascontiguousarray(load())
        img = cv2.cvtColor(rgb, TO_BGR[rgb.shape[2]]) if rgb.ndim == 3 else rgb
        rows.append([cv2.imencode(ext, img)[1].tobytes()])
    return {"IMAGE": np.array(rows, dtype=object)}
