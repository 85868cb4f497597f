"""torchvision's resnet18 and mobilenet_v2, written out (their architecture, module layout and
parameter names as torchvision 0.2x defines them), for where no torchvision loads beside the
installed torch (PyPI's wheels need PyPI's CUDA torch): test_zoo_torchvision.py uses
torchvision itself when it loads, else these. Random init only; nothing downloads."""

from __future__ import annotations


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def resnet18(torch, num_classes: int = 1000):
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, inplanes: int, planes: int, stride: int = 1):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = None
            if stride != 1 or inplanes != planes:
                self.downsample = nn.Sequential(
                    nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
                )

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            identity = x if self.downsample is None else self.downsample(x)
            return self.relu(out + identity)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            inplanes = 64
            for i, (planes, stride) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)]):
                setattr(
                    self,
                    f"layer{i + 1}",
                    nn.Sequential(BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes)),
                )
                inplanes = planes
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet()


def mobilenet_v2(torch, num_classes: int = 1000):
    nn = torch.nn

    def conv_norm_act(inp: int, out: int, kernel: int = 3, stride: int = 1, groups: int = 1):
        # torchvision's Conv2dNormActivation: a Sequential of conv, batch norm, ReLU6
        pad = (kernel - 1) // 2
        return nn.Sequential(
            nn.Conv2d(inp, out, kernel, stride, pad, groups=groups, bias=False),
            nn.BatchNorm2d(out),
            nn.ReLU6(inplace=True),
        )

    class InvertedResidual(nn.Module):
        def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int):
            super().__init__()
            hidden = int(round(inp * expand_ratio))
            self.use_res_connect = stride == 1 and inp == oup
            layers = [conv_norm_act(inp, hidden, kernel=1)] if expand_ratio != 1 else []
            layers += [
                conv_norm_act(hidden, hidden, stride=stride, groups=hidden),
                nn.Conv2d(hidden, oup, 1, 1, 0, bias=False),
                nn.BatchNorm2d(oup),
            ]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            setting = [
                [1, 16, 1, 1],
                [6, 24, 2, 2],
                [6, 32, 3, 2],
                [6, 64, 4, 2],
                [6, 96, 3, 1],
                [6, 160, 3, 2],
                [6, 320, 1, 1],
            ]
            inp, last = 32, 1280
            features = [conv_norm_act(3, inp, stride=2)]
            for t, c, n, s in setting:
                out = _make_divisible(c)
                for i in range(n):
                    features.append(InvertedResidual(inp, out, s if i == 0 else 1, t))
                    inp = out
            features.append(conv_norm_act(inp, last, kernel=1))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(p=0.2), nn.Linear(last, num_classes))
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out")
                elif isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, 0, 0.01)
                    nn.init.zeros_(m.bias)

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV2()


class Models:
    """A stand-in for `torchvision.models` (`getattr(models, name)(weights=None, num_classes=N)`)."""

    def __init__(self, torch):
        self.torch = torch

    def __getattr__(self, name: str):
        build = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}[name]
        return lambda weights=None, num_classes=1000: build(self.torch, num_classes)
