"""ResNet-50 v1.5 for ImageNet (He et al. 2015, "Deep Residual Learning"; MLPerf Training's model).

The paper's 50-layer network: a 7x7 stride-2 stem and 3x3 max pool, four stages of 3, 4, 6 and 3
bottleneck blocks (1x1, 3x3, 1x1 convolutions; 256, 512, 1024 and 2048 output channels), global
average pooling and a linear classifier (25.56M parameters at 1,000 classes). Version 1.5 moves
a downsampling block's stride from its first 1x1 convolution to its 3x3 convolution, as
torchvision and MLPerf's reference do. The definition, its module names (so torchvision's
``state_dict`` loads into it) and its initialisation follow torchvision's ``resnet50``:
Kaiming-normal (fan_out) convolutions, BatchNorm at weight 1 and bias 0, the classifier at
PyTorch's default; ``zero_init_residual`` starts the last BatchNorm of each block at weight 0, so
every block begins as the identity (Goyal et al. 2017; allowed by MLPerf's rules).
"""

from __future__ import annotations

import torch
from torch import nn

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, stride) per stage
EXPANSION = 4  # a bottleneck's output channels over its width


def _conv(cin: int, cout: int, kernel: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=kernel, stride=stride, padding=kernel // 2, bias=False)


class Bottleneck(nn.Module):
    """1x1 (reduce), 3x3 (carries the stride: v1.5), 1x1 (expand), each with BatchNorm; the
    shortcut is the identity or, where the shape changes, a strided 1x1 projection with BatchNorm."""

    def __init__(self, cin: int, width: int, stride: int = 1) -> None:
        super().__init__()
        cout = width * EXPANSION
        self.conv1 = _conv(cin, width, 1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv(width, width, 3, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv(width, cout, 1)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(_conv(cin, cout, 1, stride), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


class ResNet50(nn.Module):
    """ResNet-50 v1.5 with ``num_classes`` outputs; any input size of at least 32x32."""

    def __init__(self, num_classes: int = 1000, *, zero_init_residual: bool = False) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        cin = 64
        stages: list[nn.Sequential] = []
        for width, blocks, stride in STAGES:
            layers = [Bottleneck(cin, width, stride)]
            cin = width * EXPANSION
            layers += [Bottleneck(cin, width) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, Bottleneck):
                    nn.init.zeros_(m.bn3.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50(num_classes: int = 1000, *, zero_init_residual: bool = False) -> ResNet50:
    """ResNet-50 v1.5 (25,557,032 parameters at 1,000 classes)."""
    return ResNet50(num_classes, zero_init_residual=zero_init_residual)
