"""Where ``image_preprocess`` decodes the images a dynamic batch carries: on this host's cores
(:class:`HostDecoder`, every config set's default) or JPEGs on a CUDA GPU with nvJPEG
(:class:`GpuDecoder`, the step's ``decode_device`` parameter). One interface: each takes the
batch's requests, every header already checked (:func:`tritonrepo.image.preprocess.open_batch`),
and returns each request's FP32 ``[n, 3, size, size]`` pixels, or its error.

The GPU path decodes every JPEG of the batch in one ``torchvision.io.decode_jpeg`` call on the
device (nvJPEG), then turns each the way the host path does (EXIF orientation, centre crop of
``crop_pct`` of the shorter side at offset ``(side - crop + 1) // 2``, resize with
antialiasing, values rounded to 0..255, ``(x - mean) / std``) with PyTorch on the device
(:func:`orient`, :func:`crop_resize_normalise`), and copies the batch's pixels to the host once.
What nvJPEG does not take goes through the host path, so every file gets the host path's answer
or its error: PNG and WebP files, CMYK JPEGs, and any JPEG nvJPEG refuses (12-bit, arithmetic
coding, a corrupt one; the host path names its fault). The pixels are not the host path's:
nvJPEG decodes differently from libjpeg-turbo, a large JPEG the host path decodes at a reduced
scale (DCT scaling), and PyTorch resamples in FP32 where Pillow uses fixed point (0.15 of a level
on average for the resampling alone). On an H100 (2026-12-07, the build gate's 211 photographs)
the pixels differed by 0.68 levels on average and the classifier's top-5 moved beyond near-ties
on 46 photographs, so no shipped config set uses this path
(``docs/models/image_classification.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from PIL import Image

from tritonrepo.image.preprocess import crop_box, decode_batch, decode_one
from tritonrepo.image.spec import Preprocessing
from tritonrepo.step.errors import InvalidRequest

Opened = Sequence[tuple[Image.Image, bytes]]  # one request's (lazy image, file), headers checked
# Pillow's modes of a JPEG that nvJPEG decodes to RGB: YCbCr or RGB colour, and grayscale.
GPU_JPEG_MODES = ("RGB", "L")
EXIF_ORIENTATION = 0x0112  # TIFF/EXIF tag 274


class Decoder(Protocol):
    """Decodes a batch's requests: per request FP32 ``[n, 3, size, size]`` or the exception
    that is that request's answer (``IMAGE[i]`` named)."""

    def decode(self, requests: Sequence[Opened]) -> list[np.ndarray | Exception]: ...


class HostDecoder:
    """Pillow on this process's core, one image after another."""

    def __init__(self, prep: Preprocessing, name: str = "IMAGE") -> None:
        self.prep, self.name = prep, name

    def one(self, image: Image.Image, data: bytes, index: int) -> np.ndarray:
        """FP32 ``[3, size, size]`` of one checked image.

        Raises:
            InvalidRequest: it does not decode, prefixed ``IMAGE[index]``.
        """
        return decode_one(image, data, self.prep, f"{self.name}[{index}]")

    def decode(self, requests: Sequence[Opened]) -> list[np.ndarray | Exception]:
        out: list[np.ndarray | Exception] = []
        for opened in requests:
            try:
                out.append(decode_batch(opened, self.prep, self.name))
            except InvalidRequest as exc:
                out.append(exc)
        return out


def orientation(image: Image.Image) -> int:
    """The EXIF orientation (1..8) of a lazy Pillow image; 1 when absent or unreadable (the
    host path, too, keeps an image with a broken EXIF block as stored)."""
    try:
        value = image.getexif().get(EXIF_ORIENTATION, 1)
    except Exception:
        return 1
    return value if value in range(1, 9) else 1


def orient(pixels: Any, value: int) -> Any:
    """Turn ``[3, H, W]`` pixels (a ``torch`` tensor) upright for EXIF orientation ``value``,
    as Pillow's ``ImageOps.exif_transpose`` does (2 mirror, 3 rotate 180, 4 flip, 5 transpose,
    6 rotate 270, 7 transverse, 8 rotate 90; counter-clockwise as Pillow's ``ROTATE_*``)."""
    import torch

    if value == 2:
        return pixels.flip(-1)
    if value == 3:
        return pixels.flip(-2, -1)
    if value == 4:
        return pixels.flip(-2)
    if value == 5:
        return pixels.transpose(-2, -1)
    if value == 6:
        return torch.rot90(pixels, -1, dims=(-2, -1))
    if value == 7:
        return pixels.flip(-2, -1).transpose(-2, -1)
    if value == 8:
        return torch.rot90(pixels, 1, dims=(-2, -1))
    return pixels


def channel_constants(prep: Preprocessing, device: Any) -> tuple[Any, Any]:
    """``prep.mean`` and ``prep.std`` as FP32 ``[3, 1, 1]`` tensors on ``device``."""
    import torch

    def column(values: tuple[float, ...]) -> Any:
        return torch.tensor(values, dtype=torch.float32, device=device).view(3, 1, 1)

    return column(prep.mean), column(prep.std)


def crop_resize_normalise(
    pixels: Any, prep: Preprocessing, constants: tuple[Any, Any] | None = None
) -> Any:
    """uint8 ``[3, H, W]`` RGB (a ``torch`` tensor on any device) → FP32 ``[3, size, size]``:
    :func:`tritonrepo.image.preprocess.crop_resize`'s crop and resampling (with
    antialiasing, as Pillow's), rounded to 0..255 as Pillow's uint8 result is, then
    ``(x - prep.mean) / prep.std`` per channel (``constants``: :func:`channel_constants` on
    the pixels' device, made here when not given)."""
    import torch.nn.functional as F

    _, height, width = pixels.shape
    left, top, crop = crop_box(width, height, prep)
    square = pixels[:, top : top + crop, left : left + crop].unsqueeze(0).float()
    resized = F.interpolate(
        square, size=(prep.size, prep.size), mode=prep.interpolation, antialias=True,
        align_corners=False,
    )[0].round_().clamp_(0, 255)  # fmt: skip
    mean, std = constants or channel_constants(prep, pixels.device)
    return (resized - mean) / std


class GpuDecoder:
    """nvJPEG (``torchvision.io.decode_jpeg`` on a CUDA device) for the JPEGs of a batch, the
    host path for the rest (module docstring).

    Raises (constructor): ImportError without torchvision; RuntimeError without a CUDA device.
    """

    def __init__(self, prep: Preprocessing, device: str = "cuda", name: str = "IMAGE") -> None:
        import torch

        try:
            import torchvision.io  # noqa: F401  (fails the load here, not at the first request)
        except ImportError as exc:
            raise ImportError(
                f"decode_device is cuda, and torchvision does not import ({exc}): install the "
                "torchvision built for this PyTorch in the stubs' environment"
            ) from exc
        if not torch.cuda.is_available():
            raise RuntimeError("decode_device is cuda, and PyTorch sees no CUDA device")
        torch.set_num_threads(1)  # nothing runs on this process's cores but Pillow's fallback
        self.prep, self.name, self.device = prep, name, torch.device(device)
        self.host = HostDecoder(prep, name)
        self.constants = channel_constants(prep, self.device)

    def _nvjpeg(self, files: list[bytes]) -> list[Any]:
        """Each file decoded to uint8 ``[3, H, W]`` RGB on the device, or None where nvJPEG
        refuses it: the batch in one call, one by one when the batch call fails."""
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg

        data = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in files]
        if not data:
            return []
        try:
            return list(decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device))
        except Exception:  # one file it refuses fails the call: find which, one by one
            pass
        out = []
        for one in data:
            try:
                out.append(decode_jpeg(one, mode=ImageReadMode.RGB, device=self.device))
            except Exception:  # the host path decodes it or names its fault
                out.append(None)
        return out

    def decode(self, requests: Sequence[Opened]) -> list[np.ndarray | Exception]:
        import torch

        places = [
            (r, i) for r, opened in enumerate(requests) for i, (image, _) in enumerate(opened)
            if image.format == "JPEG" and image.mode in GPU_JPEG_MODES
        ]  # fmt: skip
        decoded = self._nvjpeg([requests[r][i][1] for r, i in places])
        on_device = {place: d for place, d in zip(places, decoded, strict=True) if d is not None}
        errors: dict[int, Exception] = {}
        pixels: list[list[Any]] = [[] for _ in requests]
        for r, opened in enumerate(requests):
            for i, (image, data) in enumerate(opened):
                if r in errors:
                    break
                if (r, i) in on_device:
                    upright = orient(on_device[r, i], orientation(image))
                    pixels[r].append(crop_resize_normalise(upright, self.prep, self.constants))
                    continue
                try:
                    host = self.host.one(image, data, i)
                except InvalidRequest as exc:
                    errors[r] = exc
                    continue
                pixels[r].append(torch.from_numpy(host).to(self.device))
        served = [r for r in range(len(requests)) if r not in errors and pixels[r]]
        flat = torch.stack([p for r in served for p in pixels[r]]) if served else None
        host_pixels = flat.cpu().numpy() if flat is not None else None  # one copy per batch
        out: list[np.ndarray | Exception] = []
        start = 0
        size = self.prep.size
        for r in range(len(requests)):
            if r in errors:
                out.append(errors[r])
            elif not pixels[r]:
                out.append(np.zeros((0, 3, size, size), np.float32))
            else:
                n = len(pixels[r])
                out.append(host_pixels[start : start + n])
                start += n
        return out
