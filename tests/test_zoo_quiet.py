"""Downloading pretrained weights prints nothing from library code (no torch.hub line, no progress
bar); the CLI says it once. The download is faked: nothing is fetched here."""

from __future__ import annotations

import logging
import sys

import pytest
import torch
import torchvision

from tricklab.cli.common import say_notices
from tricklab.cli.main import main
from tricklab.models import build_model, zoo

WEIGHTS = torchvision.models.SqueezeNet1_1_Weights.DEFAULT


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """An empty hub cache and a download that acts as torch.hub's: it writes its progress bar to
    stderr unless progress=False, and saves real SqueezeNet 1.1 weights. Returns its calls."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    state = torchvision.models.squeezenet1_1().state_dict()
    calls = []

    def download(url, dst, hash_prefix=None, progress=True):
        calls.append({"url": url, "dst": dst, "hash_prefix": hash_prefix, "progress": progress})
        if progress:
            sys.stderr.write("100%|##########| 4.73M/4.73M [00:00<00:00, 9.9MB/s]\n")
        torch.save(state, dst)

    monkeypatch.setattr(torch.hub, "download_url_to_file", download)
    monkeypatch.setattr(zoo, "_check_hash", lambda *args: None)  # the saved file is not theirs
    return calls


def test_the_library_download_prints_nothing(fake_hub, capfd):
    model = build_model("squeezenet", num_classes=10, pretrained=True)
    assert capfd.readouterr() == ("", "")
    assert len(fake_hub) == 1 and fake_hub[0]["progress"] is False
    assert fake_hub[0]["url"] == WEIGHTS.url
    # the hash prefix in the file's name is checked, as torch.hub checks it
    assert fake_hub[0]["hash_prefix"] and fake_hub[0]["hash_prefix"] in WEIGHTS.url
    assert model.features[3].squeeze.weight.shape[0] == 16


def test_the_download_is_an_info_record_marked_for_the_cli(fake_hub, caplog):
    with caplog.at_level(logging.INFO, logger="tricklab.models.zoo"):
        build_model("squeezenet", num_classes=10, pretrained=True)
    notices = [r for r in caplog.records if getattr(r, "notice", False)]
    assert len(notices) == 1 and WEIGHTS.url in notices[0].getMessage()


def test_the_cli_layer_says_the_download_once(fake_hub, capfd):
    with say_notices():
        build_model("squeezenet", num_classes=10, pretrained=True)
        build_model("squeezenet", num_classes=10, pretrained=True)  # from the cache: no line
    out, err = capfd.readouterr()
    assert out == ""
    assert err.count("Downloading the ImageNet weights of squeezenet") == 1
    assert len(fake_hub) == 1


def test_say_notices_leaves_logging_as_it_was():
    logger = logging.getLogger("tricklab.models.zoo")
    before = (logger.level, list(logger.handlers))
    with say_notices():
        assert logger.getEffectiveLevel() <= logging.INFO
    assert (logger.level, list(logger.handlers)) == before


def test_tricklab_train_with_pretrained_weights_says_the_download_on_stderr(
    fake_hub, tmp_path, capfd
):
    code = main(
        ["train", "data.name=synthetic", "data.train_size=64", "data.test_size=64",
         "model.name=squeezenet", "model.pretrained=true", "loader.batch_size=32",
         "run.epochs=1", "run.device=cpu", "--out", str(tmp_path / "run")]
    )  # fmt: skip
    out, err = capfd.readouterr()
    assert code == 0, err
    assert err.count("Downloading the ImageNet weights of squeezenet") == 1
    assert "Downloading" not in out and "100%|" not in err
