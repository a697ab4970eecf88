"""The built-in demo model (MobileNetV2-style) of ``opscope demo`` and ``opscope model demo``; no torchvision."""

from __future__ import annotations

from opscope.capture import require_torch


def mobilenet_v2_mini(num_classes: int = 10, width: int = 16):
    """A MobileNetV2-style network: inverted residual blocks with depthwise 3x3 convolutions."""
    torch = require_torch()
    from torch import nn  # after require_torch: its ImportError says how to install torch

    def conv_bn(cin, cout, stride=1, groups=1, kernel=3, act=True):
        layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        if act:
            layers.append(nn.ReLU6(inplace=True))
        return nn.Sequential(*layers)

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            self.use_residual = stride == 1 and cin == cout
            self.block = nn.Sequential(
                conv_bn(cin, hidden, kernel=1),                          # pointwise expand
                conv_bn(hidden, hidden, stride=stride, groups=hidden),  # depthwise 3x3
                conv_bn(hidden, cout, kernel=1, act=False),             # pointwise project
            )

        def forward(self, x):
            y = self.block(x)
            return x + y if self.use_residual else y

    class MiniMobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            w = width
            self.stem = conv_bn(3, w, stride=2)
            self.blocks = nn.Sequential(
                InvertedResidual(w, w, 1, 1),
                InvertedResidual(w, 2 * w, 2, 4),
                InvertedResidual(2 * w, 2 * w, 1, 4),
                InvertedResidual(2 * w, 4 * w, 2, 4),
                InvertedResidual(4 * w, 4 * w, 1, 4),
            )
            self.head = conv_bn(4 * w, 8 * w, kernel=1)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Linear(8 * w, num_classes)

        def forward(self, x):
            x = self.head(self.blocks(self.stem(x)))
            return self.classifier(torch.flatten(self.pool(x), 1))

    return MiniMobileNetV2()
