"""The digit_scans core model: a team's own PyTorch network, the ResNet-18 layout of He et al.
2015 ("Deep Residual Learning for Image Recognition", table 1: BasicBlocks [2, 2, 2, 2], widths
64-512) with one input channel, trained here on scikit-learn's bundled digits scanned up to
64 x 64 pixels.

``build()`` returns the trained ``torch.nn.Module`` and an example input: the pipeline builder
exports it to ONNX for the ``cpu`` set, and ``make artifacts-gpu`` exports the same weights as a
``torch.export`` program for the ``torch_gpu`` set.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from pipelines.digit_scans.steps import SIDE, preprocess

EPOCHS = 3  # held-out accuracy 0.973 after three passes (seed 0); more adds build time only
BATCH = 64
SEED = 0


def scans() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fixed split ``(x_train, x_test, y_train, y_test)``: x UINT8 ``[n, 64, 64]`` (0 white
    to 255 black: sklearn's 8 x 8 digits, 0 to 16, scaled bilinearly), y int ``[n]`` (0-9);
    25 % held out, stratified, ``random_state=0``."""
    data = load_digits()
    small = torch.as_tensor(data.images, dtype=torch.float32)[:, None] / 16.0
    big = nn.functional.interpolate(small, size=(SIDE, SIDE), mode="bilinear", align_corners=False)
    x = (big[:, 0].clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    return tuple(
        train_test_split(x, data.target, test_size=0.25, stratify=data.target, random_state=0)
    )


class BasicBlock(nn.Module):
    """Two 3 x 3 convolutions with batch norm and an identity (or 1 x 1 projection) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class DigitResNet(nn.Module):
    """``pixels`` FP32 ``[N, 1, 64, 64]`` (normalised, :func:`steps.preprocess`) -> ``logits``
    FP32 ``[N, 10]``."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )  # fmt: skip
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(512, 10)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        features = self.layers(self.stem(pixels))
        return self.head(features.mean(dim=(2, 3)))


@cache
def fit() -> DigitResNet:
    """The network trained (seed 0, CPU) on the training split: Adam, lr 1e-3, :data:`EPOCHS`
    passes of batches of :data:`BATCH`; returned in eval mode."""
    torch.manual_seed(SEED)
    x_train, _, y_train, _ = scans()
    pixels = torch.as_tensor(preprocess({"IMAGE": x_train})["pixels"])
    labels = torch.as_tensor(y_train, dtype=torch.int64)
    model = DigitResNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    order = torch.Generator().manual_seed(SEED)
    model.train()
    for _ in range(EPOCHS):
        for batch in torch.randperm(len(labels), generator=order).split(BATCH):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(pixels[batch]), labels[batch])
            loss.backward()
            optimizer.step()
    return model.eval()


def accuracy() -> float:
    """Held-out accuracy of :func:`fit` (the 450 test scans)."""
    _, x_test, _, y_test = scans()
    model = fit()  # trained outside inference mode
    with torch.inference_mode():
        logits = model(torch.as_tensor(preprocess({"IMAGE": x_test})["pixels"]))
    return float((logits.argmax(1).numpy() == y_test).mean())


def build() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The trained network and an example input ``{"pixels": FP32 [2, 1, 64, 64]}``."""
    _, x_test, _, _ = scans()
    example = torch.as_tensor(preprocess({"IMAGE": x_test[:2]})["pixels"])
    return fit(), {"pixels": example}
