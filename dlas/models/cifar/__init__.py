"""Models trained from scratch on 32x32 inputs (CIFAR-10 and the offline digits set)."""

from dlas.models.cifar.mobilenetv1 import MobileNetV1, mobilenetv1
from dlas.models.cifar.mobilenetv2 import MobileNetV2, mobilenetv2
from dlas.models.cifar.resnet import ResNet, resnet18
from dlas.models.cifar.vgg import VGG, vgg16

__all__ = ["VGG", "MobileNetV1", "MobileNetV2", "ResNet", "mobilenetv1", "mobilenetv2",
           "resnet18", "vgg16"]
