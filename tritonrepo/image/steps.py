"""The Python-backend steps of the ``image_classification`` ensemble.

``model_repository/image_preprocess/1/model.py`` and ``image_postprocess/1/model.py`` are
one-line subclasses of these.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from tritonrepo.image import spec
from tritonrepo.image.decoders import Decoder, GpuDecoder, HostDecoder
from tritonrepo.image.labels import read_labels
from tritonrepo.image.postprocess import check_top_k, softmax, top_k
from tritonrepo.image.preprocess import open_batch
from tritonrepo.step.errors import InvalidRequest
from tritonrepo.step.parameters import Parameter
from tritonrepo.step.python_step import Outputs, PythonStep


class PreprocessStep(PythonStep):
    """``IMAGE`` BYTES ``[b, 1]`` (one encoded JPEG/PNG/WebP file per item) + optional ``TOP_K``
    INT32 ``[b, 1]`` → ``pixels`` FP32 ``[b, 3, 224, 224]`` (FP16 if the config's output says
    so; the step casts to the config's type) and ``K`` INT32 ``[b, 1]``.

    Config parameters (:attr:`PARAMETERS`):

    * ``preprocessing``: a key of ``spec.PREPROCESSING`` (the classifier's normalisation;
      default ``efficientnet_lite0``);
    * ``max_image_pixels``: the most pixels (width x height) one image's header may declare;
      default ``spec.MAX_IMAGE_PIXELS`` (40 MP: the photo of a 40 MP camera). Pillow's own
      decompression-bomb guard is set to the same value in the stub;
    * ``max_request_pixels``: the most pixels one request's images may need decoded in all,
      read from their headers before any is decoded; a JPEG counts at the reduced scale it is
      decoded at (down to a 256-pixel shorter side), PNG and WebP at full size; default
      ``spec.MAX_REQUEST_PIXELS`` (120 MP: three of the largest images, or 32 images of
      3.75 MP; ~9 ms of one core per megapixel, so a few seconds of one stub at most; the
      derivation is in ``spec``). Keep it at least ``max_image_pixels``, or the largest images
      are refused even alone;
    * ``decode_device``: ``cpu`` (default) decodes every image with Pillow on the stub's core;
      ``cuda`` decodes the batch's JPEGs on the GPU with nvJPEG (``tritonrepo.image.decoders``:
      PNG, WebP and what nvJPEG refuses still on the core) and needs PyTorch with CUDA and
      torchvision in the stub's environment. The instances are ``KIND_CPU``, so the GPU is
      PyTorch's current device (the first visible one).

    Raises (per request, as its error): InvalidRequest / OverLimit when any image of the
    request is empty, not JPEG/PNG/WebP, truncated or corrupt, or over a size limit, naming the
    image (``IMAGE[i]``); OverLimit when the request's images together are over
    ``max_request_pixels``, naming the first image that crosses it. Size limits are checked from
    the headers before anything is decoded. The other requests of the dynamic batch are served.
    A request is answered whole or not at all, since Triton gives one response per request.
    """

    PARAMETERS = (
        Parameter(
            "preprocessing",
            "choice",
            "efficientnet_lite0",
            "",
            "the classifier's resize and normalisation (spec.PREPROCESSING)",
            choices=tuple(spec.PREPROCESSING),
        ),
        Parameter(
            "max_image_pixels",
            "int",
            spec.MAX_IMAGE_PIXELS,
            "pixels",
            "the most pixels one image's header may declare; refused before decoding",
            minimum=1,
            maximum=spec.MAX_IMAGE_SIDE**2,
        ),
        Parameter(
            "max_request_pixels",
            "int",
            spec.MAX_REQUEST_PIXELS,
            "pixels",
            "the most pixels one request's images may need decoded in all (JPEG at its reduced "
            "scale); refused before decoding",
            minimum=1,
        ),
        Parameter(
            "decode_device",
            "choice",
            "cpu",
            "",
            "where the images are decoded: cpu (Pillow) or cuda (nvJPEG for JPEGs)",
            choices=("cpu", "cuda"),
        ),
    )

    def setup(self) -> None:
        self.prep = spec.PREPROCESSING[self.settings["preprocessing"]]
        self.decoder: Decoder = (
            GpuDecoder(self.prep, "cuda", "IMAGE")
            if self.settings["decode_device"] == "cuda"
            else HostDecoder(self.prep, "IMAGE")
        )
        self.max_image_pixels = self.settings["max_image_pixels"]
        self.max_request_pixels = self.settings["max_request_pixels"]
        # Pillow's guard (a warning above it, an error above twice it) follows the configured
        # limit, so raising the limit is not undone by Pillow; one instance per process.
        Image.MAX_IMAGE_PIXELS = self.max_image_pixels

    def prepare(self, inputs: dict[str, np.ndarray]) -> tuple[list, np.ndarray]:
        """Check the request's headers and ``TOP_K``: ``(opened images, K)``; nothing is
        decoded yet (:meth:`run` decodes the whole batch)."""
        if "IMAGE" not in inputs:  # optional in the ensemble config: see its comment
            raise InvalidRequest("input 'IMAGE' is missing")
        files = inputs["IMAGE"].reshape(-1)
        k = check_top_k(inputs.get("TOP_K"))
        opened = open_batch(
            [bytes(f) for f in files],
            self.prep,
            "IMAGE",
            max_pixels=self.max_image_pixels,
            max_request_pixels=self.max_request_pixels,
        )
        return opened, np.full((len(files), 1), k, dtype=np.int32)

    def run(self, items: list[tuple[list, np.ndarray]]) -> list[Outputs | Exception]:
        pixels = self.decoder.decode([opened for opened, _ in items])
        return [
            p if isinstance(p, Exception) else {"pixels": p, "K": k}
            for p, (_, k) in zip(pixels, items, strict=True)
        ]


class PostprocessStep(PythonStep):
    """``logits`` FP32 ``[b, 1000]`` + ``K`` INT32 ``[b, 1]`` → ``LABELS`` BYTES ``[b, K]``
    (ImageNet class names from ``labels.txt`` in the version folder), ``SCORES`` FP32
    ``[b, K]`` (softmax probabilities, descending) and ``PROBABILITIES`` FP32 ``[b, 1000]``
    (the whole softmax by class index, when the config declares it: the output that Triton's
    classification extension ranks, with the labels of its ``label_filename``).

    Raises (per request): InvalidRequest when the logits are not ``[b, 1000]``.
    """

    PARAMETERS = (
        Parameter(
            "labels_file", "str", spec.LABELS_FILE, "file", "class names in the version folder"
        ),
    )

    def setup(self) -> None:
        labels = read_labels(self.artifact(self.settings["labels_file"]))
        self.labels = np.array([label.encode() for label in labels], dtype=np.object_)
        self.full = "PROBABILITIES" in self.output_dtypes

    def prepare(self, inputs: dict[str, np.ndarray]) -> Outputs:
        logits = inputs[spec.CORE_OUTPUT]
        if logits.ndim != 2 or logits.shape[1] != len(self.labels):
            raise InvalidRequest(f"logits must be [b, {len(self.labels)}], got {logits.shape}")
        indices, probs = top_k(logits, check_top_k(inputs["K"]))
        out = {"LABELS": self.labels[indices], "SCORES": probs}
        if self.full:
            out["PROBABILITIES"] = softmax(logits)
        return out

    def run(self, items: list[Outputs]) -> list[Outputs | Exception]:
        return list(items)
