"""`data.name=cifar10-sample`: 10,000 train / 2,000 test real CIFAR-10 images shipped with tricklab.

A class-balanced sample of the JPEG q75 copy of CIFAR-10 (1,000 / 200 images per class), stored as
package data in `tricklab/data/samples/cifar10-sample/` (train.tar.gz, test.tar.gz, and a README
with its provenance and checksums; `scripts/make_cifar10_sample.py` rebuilds it byte for byte).
It needs no download and no data folder: a fresh install has real images offline.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
from pathlib import Path

from tricklab.core.errors import TrickLabError
from tricklab.data.dataset import LoadedSource, SourceRequest
from tricklab.data.imagefolder import load_imagefolder

SAMPLE_NAME = "cifar10-sample"


def sample_dir() -> Path:
    """The installed folder holding the sample's train.tar.gz and test.tar.gz."""
    folder = importlib.resources.files("tricklab").joinpath("data", "samples", SAMPLE_NAME)
    if not isinstance(folder, Path) or not folder.joinpath("train.tar.gz").is_file():
        raise TrickLabError(
            f"the {SAMPLE_NAME} archives are missing from the tricklab package ({folder}); "
            "reinstall tricklab (pip install --force-reinstall tricklab)"
        )
    return folder


def load_cifar10_sample(request: SourceRequest) -> LoadedSource:
    """The loader `load_dataset` calls: the packaged archives read as an image folder (cached)."""
    if request.data_dir is not None:
        raise TrickLabError(
            f"dataset {SAMPLE_NAME!r} ships with tricklab and takes no data_dir "
            f"(got {request.data_dir}); drop --data-dir / data.dir="
        )
    loaded = load_imagefolder(dataclasses.replace(request, data_dir=sample_dir()))
    return dataclasses.replace(loaded, source=f"{SAMPLE_NAME} ({loaded.source})")
