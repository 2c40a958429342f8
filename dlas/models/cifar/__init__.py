"""Models trained from scratch on 32x32 inputs (CIFAR-10 and the offline digits set)."""

from dlas.models.cifar.mobilenetv2 import MobileNetV2, mobilenetv2
from dlas.models.cifar.resnet import ResNet, resnet18

__all__ = ["MobileNetV2", "ResNet", "mobilenetv2", "resnet18"]
