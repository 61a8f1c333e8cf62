"""ResNet-20 v1 for CIFAR-10 (He et al. 2015, section 4.2), as MLBench's ``ResNetCIFAR``.

3x3 conv stem (16 channels), three stages of ``n`` basic blocks (16, 32, 64 channels, stride 2
at the start of stages 2 and 3), global average pooling and a linear classifier; depth 6n+2
(n = 3 gives ResNet-20, 0.27M parameters). Post-activation blocks (v1). Like MLBench, the
shortcut is the identity within a stage and a projection (1x1 conv + BN, the paper's option B)
where the stage halves the resolution and widens; convolutions use Kaiming-normal (fan_out)
initialisation and BatchNorm starts at weight 1, bias 0.
"""

from __future__ import annotations

import torch
from torch import nn


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """conv-BN-ReLU-conv-BN, plus the shortcut, then ReLU (post-activation, v1)."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv3x3(cin, cout, stride)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = _conv3x3(cout, cout)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += residual
        return self.relu(out)


class ResNetCifar(nn.Module):
    """ResNet-(6n+2) for 32x32 inputs and ``num_classes`` outputs."""

    def __init__(self, depth: int = 20, num_classes: int = 10) -> None:
        super().__init__()
        if depth % 6 != 2:
            raise ValueError(f"CIFAR ResNet depth must be 6n+2, got {depth}")
        n = (depth - 2) // 6
        self.prep = nn.Sequential(_conv3x3(3, 16), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        self.stage1 = self._stage(16, 16, n, stride=1)
        self.stage2 = self._stage(16, 32, n, stride=2)
        self.stage3 = self._stage(32, 64, n, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    @staticmethod
    def _stage(cin: int, cout: int, blocks: int, stride: int) -> nn.Sequential:
        layers = [BasicBlock(cin, cout, stride)]
        layers += [BasicBlock(cout, cout) for _ in range(blocks - 1)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stage3(self.stage2(self.stage1(self.prep(x))))
        return self.classifier(torch.flatten(self.pool(x), 1))


def resnet20(num_classes: int = 10) -> ResNetCifar:
    """ResNet-20 v1 (0.27M parameters)."""
    return ResNetCifar(20, num_classes)
