"""tricklab: train CIFAR-scale image classifiers fast and measure honestly which tricks help."""

__version__ = "0.1.0"
