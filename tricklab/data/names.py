"""The names a recipe and the command line choose from, importable without torch.

`tricklab --help`, `tricklab tricks` and recipe checks read these; the modules they name are
imported only when a dataset is loaded.
"""

from __future__ import annotations

# data.name -> "module:function" that loads that source. `load_dataset` dispatches through this
# table, and the recipe's choices and the CLI's help list its keys. A loader takes a
# `tricklab.data.dataset.SourceRequest` and returns a `LoadedSource`; subsets, the held-out split
# and the memory checks are done around it. A new source is one more line here (as cifar10-sample).
DATASET_SOURCES: dict[str, str] = {
    "cifar10": "tricklab.data.cifar:load_cifar",
    "cifar100": "tricklab.data.cifar:load_cifar",
    "cifar10-sample": "tricklab.data.sample:load_cifar10_sample",  # shipped: 10k/2k real images
    "mnist": "tricklab.data.torchvision_sources:load_torchvision",
    "fashion-mnist": "tricklab.data.torchvision_sources:load_torchvision",
    "svhn": "tricklab.data.torchvision_sources:load_torchvision",
    "imagefolder": "tricklab.data.imagefolder:load_imagefolder",
    "synthetic": "tricklab.data.synthetic:load_synthetic",
}
DATASET_NAMES = tuple(DATASET_SOURCES)
# What a number on a source is not, said wherever the source is named (`data show`, reports).
DATASET_NOTES = {
    "cifar10-sample": "real CIFAR-10 images as a JPEG q75 copy, a class-balanced fifth of the "
    "train set: accuracies on it are not CIFAR-10 results",
}

# The dtypes `DeviceLoader` can keep a split in (loader.storage_dtype); torch dtypes of the same
# names in `tricklab.data.loaders.STORAGE_DTYPES`.
STORAGE_DTYPE_NAMES = ("uint8", "float16", "bfloat16", "float32")
