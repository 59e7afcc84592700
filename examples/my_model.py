"""A model of your own, trained and ablated by tricklab: any nn.Module, built by a function that
takes the data's `num_classes`, `in_channels` and `image_size`.

From the repository's root folder (the current folder is searched for the module):

    tricklab train model.name=examples.my_model:make data.name=cifar10-sample run.epochs=2
    tricklab models examples.my_model:make        # its params and MACs at 32x32

or from Python, under a name of your choosing:

    import tricklab
    from examples.my_model import make
    tricklab.register_model("my-convnet", make)
    recipe = tricklab.load_recipe(None, ["model.name=my-convnet", "data.name=cifar10-sample"])
    tricklab.train(recipe)
"""

from __future__ import annotations

from torch import nn


def conv_bn_relu(in_channels: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class SmallConvNet(nn.Module):
    """Conv-BN-ReLU stages, each doubling the channels and halving the map, then a global average
    pool and a linear head."""

    def __init__(self, num_classes: int, in_channels: int, stages: int, width: int = 32):
        super().__init__()
        layers, channels = [conv_bn_relu(in_channels, width)], width
        for _ in range(stages):
            layers += [conv_bn_relu(channels, 2 * channels), nn.MaxPool2d(2)]
            channels *= 2
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def make(num_classes: int, in_channels: int, image_size: int) -> nn.Module:
    """Small conv net: 3 pooling stages (32 to 256 channels), fewer for images under 16 px."""
    stages = 3 if image_size >= 16 else max(1, image_size.bit_length() - 2)
    return SmallConvNet(num_classes, in_channels, stages)
