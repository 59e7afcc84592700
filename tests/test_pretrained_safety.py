"""Pretrained weights from the torch hub cache are unpickled with weights_only=True: a pickle planted
there does not run, and any file that will not load is one line naming it."""

import contextlib
import logging
import pickle

import pytest
import torch
import torchvision

from tricklab.core.errors import TrickLabError
from tricklab.models import build_model, zoo


class Payload:
    """Unpickling it creates `marker`: what a planted pickle's code could do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty torch hub cache in a temporary TORCH_HOME; its checkpoints folder."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)

    def offline(url, *args, **kwargs):  # nothing may be fetched here
        raise AssertionError(f"tried to download {url}")

    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    # the files planted here are not torchvision's: their names' SHA-256 prefixes do not fit
    monkeypatch.setattr(zoo, "_check_hash", lambda *args: None)
    checkpoints = tmp_path / "torch" / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    return checkpoints


def plant(checkpoints, weights, marker):
    path = checkpoints / weights.url.rsplit("/", 1)[-1]
    path.write_bytes(pickle.dumps(Payload(marker)))
    return path


def test_torchvisions_own_loader_would_run_the_planted_pickle(hub, tmp_path):
    """The plant is where torchvision looks, and its loader runs it: the hazard is real."""
    weights = torchvision.models.ResNet18_Weights.DEFAULT
    marker = tmp_path / "ran"
    plant(hub, weights, marker)
    with contextlib.suppress(Exception):  # it fails after running the code
        torchvision.models.resnet18(weights=weights, progress=False)
    assert marker.exists()


def test_a_planted_pickle_does_not_run_and_is_one_line_naming_the_file(hub, tmp_path):
    weights = torchvision.models.ResNet18_Weights.DEFAULT
    marker = tmp_path / "ran"
    path = plant(hub, weights, marker)
    with pytest.raises(TrickLabError) as info:
        build_model("resnet18-tv", num_classes=10, pretrained=True)
    message = str(info.value)
    assert not marker.exists()
    assert "\n" not in message and str(path) in message
    assert "not plain weights: Unsupported" in message and f"rm '{path}'" in message


@pytest.mark.parametrize(
    "name, weights",
    [
        ("squeezenet", torchvision.models.SqueezeNet1_1_Weights.DEFAULT),
        ("densenet121", torchvision.models.DenseNet121_Weights.DEFAULT),
        ("vgg16-bn", torchvision.models.VGG16_BN_Weights.DEFAULT),
    ],
)
def test_no_torchvision_family_runs_a_planted_pickle(hub, tmp_path, name, weights):
    marker = tmp_path / "ran"
    plant(hub, weights, marker)
    with pytest.raises(TrickLabError, match="cannot be loaded"):
        build_model(name, num_classes=10, pretrained=True)
    assert not marker.exists()


def test_a_state_dict_of_other_keys_is_one_line_naming_the_file(hub):
    weights = torchvision.models.AlexNet_Weights.DEFAULT
    path = hub / weights.url.rsplit("/", 1)[-1]
    torch.save({"conv.weight": torch.zeros(3)}, path)
    with pytest.raises(TrickLabError) as info:
        build_model("alexnet", num_classes=10, pretrained=True)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_densenet_imagenet_files_with_the_old_layer_names_load(hub):
    """torchvision's DenseNet files name layers `norm.1`, `conv.2`: they load into `norm1`, `conv2`."""
    weights = torchvision.models.DenseNet121_Weights.DEFAULT
    torch.manual_seed(0)
    state = torchvision.models.densenet121().state_dict()
    legacy = {
        k.replace(".norm1.", ".norm.1.").replace(".conv2.", ".conv.2."): v for k, v in state.items()
    }
    assert legacy.keys() != state.keys()
    torch.save(legacy, hub / weights.url.rsplit("/", 1)[-1])
    model = build_model("densenet121", num_classes=10, pretrained=True)
    loaded = model.state_dict()
    key = "features.denseblock1.denselayer1.conv2.weight"
    assert torch.equal(loaded[key], state[key])


def test_a_download_prints_nothing_and_its_line_goes_to_the_log(hub, monkeypatch, capsys, caplog):
    weights = torchvision.models.SqueezeNet1_1_Weights.DEFAULT
    state = torchvision.models.squeezenet1_1().state_dict()

    def download(url, dst, *args, **kwargs):  # torch.hub says "Downloading: ..." before it
        torch.save(state, dst)

    monkeypatch.setattr(torch.hub, "download_url_to_file", download)
    with caplog.at_level(logging.INFO, logger="tricklab.models.zoo"):
        model = build_model("squeezenet", num_classes=10, pretrained=True)
    assert capsys.readouterr() == ("", "")
    assert any(
        "Downloading" in r.getMessage() and weights.url in r.getMessage() for r in caplog.records
    )
    assert torch.equal(model.features[3].squeeze.weight, state["features.3.squeeze.weight"])


def test_a_download_that_fails_its_hash_check_is_one_line(hub, monkeypatch):
    def corrupted(url, dst, *args, **kwargs):
        raise RuntimeError('invalid hash value (expected "b8a52dc0", got "00000000")')

    monkeypatch.setattr(torch.hub, "download_url_to_file", corrupted)
    with pytest.raises(
        TrickLabError, match="could not download the ImageNet weights of squeezenet"
    ):
        build_model("squeezenet", num_classes=10, pretrained=True)


def test_a_cached_file_that_is_not_the_one_its_name_hashes_is_one_line(tmp_path, monkeypatch):
    """Fifth hostile round: a cached file with the right keys and shapes but NaN values loaded
    and the run diverged; its name carries the SHA-256 prefix torch.hub checks on download."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    weights = torchvision.models.SqueezeNet1_1_Weights.DEFAULT
    state = {
        k: torch.full_like(v, float("nan"))
        for k, v in torchvision.models.squeezenet1_1().state_dict().items()
    }
    path = tmp_path / "torch" / "hub" / "checkpoints" / weights.url.rsplit("/", 1)[-1]
    path.parent.mkdir(parents=True)
    torch.save(state, path)
    with pytest.raises(TrickLabError, match="its SHA-256 does not begin with") as info:
        build_model("squeezenet", num_classes=10, pretrained=True)
    assert "\n" not in str(info.value) and f"rm '{path}'" in str(info.value)


def test_a_cached_weights_name_that_is_no_regular_file_is_one_line_not_a_hang(
    tmp_path, monkeypatch
):
    """Sixth hostile round: a link to /dev/zero (or a FIFO) under the hashed name was hashed for ever."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    weights = torchvision.models.SqueezeNet1_1_Weights.DEFAULT
    path = tmp_path / "torch" / "hub" / "checkpoints" / weights.url.rsplit("/", 1)[-1]
    path.parent.mkdir(parents=True)
    path.symlink_to("/dev/zero")
    with pytest.raises(TrickLabError, match="it is not a regular file"):
        build_model("squeezenet", num_classes=10, pretrained=True)


def test_a_cached_weights_name_that_is_a_folder_is_told_to_be_removed_as_a_folder(
    tmp_path, monkeypatch
):
    """Eleventh hostile round: the advice for a folder there was `rm '<path>'`, which fails."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    weights = torchvision.models.SqueezeNet1_1_Weights.DEFAULT
    path = tmp_path / "torch" / "hub" / "checkpoints" / weights.url.rsplit("/", 1)[-1]
    path.mkdir(parents=True)
    with pytest.raises(TrickLabError, match="delete that folder") as info:
        build_model("squeezenet", num_classes=10, pretrained=True)
    assert f"rm -r '{path}'" in str(info.value)
