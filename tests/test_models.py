"""The model registry and the networks: every model trains, airbench's tricks do what they claim."""

from __future__ import annotations

import json
import urllib.error

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from tricklab.core.errors import TrickLabError
from tricklab.models import MODELS, build_model, list_models, zoo
from tricklab.models.airbench import (
    ConvGroup,
    GlobalMaxPool,
    PatchWhitening,
    airbench,
    dirac_init_,
)
from tricklab.models.resnet import resnet9
from tricklab.models.zoo import adapt_input_channels

INPUT_SHAPES = [(3, 32, 32), (1, 28, 28)]


def _small_model(name: str, in_channels: int = 3, image_size: int = 32) -> nn.Module:
    width = 0.25 if "width" in MODELS[name].options else 1.0
    return build_model(
        name, num_classes=10, in_channels=in_channels, image_size=image_size, width=width
    )


def _correlated_images(n: int, channels: int = 3, size: int = 16) -> torch.Tensor:
    """Smoothed noise with a shared component across channels: strongly correlated 2×2 patches."""
    generator = torch.Generator().manual_seed(0)
    noise = torch.randn(n, 1, size + 2, size + 2, generator=generator)
    shared = F.avg_pool2d(noise, 3, stride=1)
    own = torch.randn(n, channels, size, size, generator=generator)
    return 2.0 * shared + 0.3 * own + 0.5


@pytest.mark.parametrize("shape", INPUT_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(MODELS))
def test_every_model_trains_one_sgd_step(name, shape):
    torch.manual_seed(0)
    model = _small_model(name, in_channels=shape[0], image_size=shape[1]).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in trainable]
    optimizer = torch.optim.SGD(trainable, lr=0.1)
    images, labels = torch.randn(4, *shape), torch.tensor([0, 1, 2, 3])

    logits = model(images)
    loss = F.cross_entropy(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

    assert logits.shape == (4, 10)
    assert torch.isfinite(loss)
    unchanged = [i for i, (b, p) in enumerate(zip(before, trainable)) if torch.equal(b, p)]
    assert unchanged == []


@pytest.mark.parametrize("name", list(MODELS))
def test_every_model_accepts_its_smallest_declared_image_size(name):
    size = MODELS[name].min_image_size
    model = _small_model(name, image_size=size).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, size, size)).shape == (1, 10)


def test_image_smaller_than_the_model_supports_raises():
    with pytest.raises(TrickLabError, match="at least 15×15"):
        build_model("alexnet", num_classes=10, image_size=14)


def test_list_models_returns_every_registered_model():
    assert [info.name for info in list_models()] == list(MODELS)


def _airbench_whitening_weights(images: torch.Tensor, eps: float = 5e-4) -> torch.Tensor:
    """airbench94's whitening filters, from its formula: the eigenvectors of the uncentred second
    moment of all 2×2 patches, largest eigenvalue first, over sqrt(eigenvalue + eps), then negated."""
    c = images.shape[1]
    windows = images.double().unfold(2, 2, 1).unfold(3, 2, 1)  # N×C×H'×W'×2×2
    patches = windows.permute(0, 2, 3, 1, 4, 5).reshape(-1, c * 4)  # one (c, row, col) patch a row
    second_moment = patches.T @ patches / len(patches)
    eigenvalues, eigenvectors = torch.linalg.eigh(second_moment)
    order = eigenvalues.argsort(descending=True)
    scaled = eigenvectors.T[order] / torch.sqrt(eigenvalues[order] + eps)[:, None]
    return torch.cat([scaled, -scaled]).reshape(-1, c, 2, 2).float()


def test_whitening_filters_equal_airbench94s_formula():
    images = _correlated_images(4, size=8)
    whiten = PatchWhitening(in_channels=3)
    whiten.init_from_data(images)
    expected = _airbench_whitening_weights(images)
    # An eigenvector is defined up to its sign; a flipped one swaps a filter with its negation.
    signs = torch.sign((whiten.weight[:12] * expected[:12]).sum(dim=(1, 2, 3)))
    assert torch.all(signs != 0)
    torch.testing.assert_close(
        whiten.weight, expected * signs.repeat(2).view(-1, 1, 1, 1), rtol=1e-4, atol=1e-5
    )


def test_whitening_filters_come_strongest_direction_first():
    # A first block narrower than the 24 whitening channels gets the first ones through its Dirac
    # init: they must be the directions that carry the most of the image, not the noisiest.
    images = _correlated_images(16)
    whiten = PatchWhitening(in_channels=3)
    whiten.init_from_data(images)
    directions = F.normalize(whiten.weight[:12].reshape(12, -1), dim=1)
    patches = F.unfold(images, kernel_size=2).transpose(1, 2).reshape(-1, 12)
    energy = (patches @ directions.T).pow(2).mean(0)
    assert torch.all(energy[:-1] >= energy[1:])
    assert energy[0] > 10 * energy[-1]


def test_whitening_makes_the_patch_second_moment_identity():
    images = _correlated_images(64)
    whiten = PatchWhitening(in_channels=3)
    whiten.init_from_data(images)

    with torch.no_grad():
        projections = F.conv2d(images, whiten.weight)  # before the bias
    half = whiten.out_channels // 2
    positive = projections[:, :half].permute(0, 2, 3, 1).reshape(-1, half)
    second_moment = positive.T @ positive / len(positive)

    raw = F.unfold(images, kernel_size=2).transpose(1, 2).reshape(-1, 12)
    raw_eigenvalues = torch.linalg.eigvalsh(raw.T @ raw / len(raw))
    assert raw_eigenvalues.max() > 10 * raw_eigenvalues.min()  # the input is far from white
    torch.testing.assert_close(second_moment, torch.eye(half), atol=2e-2, rtol=0)


def test_whitening_negative_filters_mirror_the_positive_ones():
    whiten = PatchWhitening(in_channels=1)
    whiten.init_from_data(_correlated_images(8, channels=1))
    torch.testing.assert_close(whiten.weight[4:], -whiten.weight[:4])


def test_whitening_bias_starts_at_zero_as_airbench94s():
    model = build_model("airbench", num_classes=10)
    model.init_from_data(_correlated_images(8))
    assert torch.count_nonzero(model.whiten.bias) == 0


def test_whitening_weights_are_frozen_and_its_bias_trains():
    model = build_model("airbench", num_classes=10)
    model.init_from_data(_correlated_images(8))
    assert model.whiten.weight.requires_grad is False
    assert model.whiten.bias.requires_grad is True


def test_whitening_rejects_images_with_the_wrong_channel_count():
    with pytest.raises(TrickLabError, match="N×3×H×W"):
        PatchWhitening(in_channels=3).init_from_data(torch.randn(4, 1, 8, 8))


def test_whitening_reads_the_same_patches_as_unfold_across_chunks():
    # The patches come from four shifted views (F.unfold is 1.6-2.7x slower on a CPU in float64):
    # the same second moment, bit for bit, over chunks that do not divide the images evenly.
    images = torch.randn(7, 2, 6, 5)
    whiten = PatchWhitening(in_channels=2)
    whiten.init_from_data(images, chunk_size=3)
    patches = F.unfold(images.double(), kernel_size=2).transpose(1, 2).reshape(-1, 8)
    eigenvalues, eigenvectors = torch.linalg.eigh(patches.T @ patches / len(patches))
    filters = eigenvectors.flip(1).T / torch.sqrt(eigenvalues.flip(0) + whiten.eps)[:, None]
    expected = torch.cat([filters, -filters]).reshape_as(whiten.weight).float()
    signs = torch.sign((whiten.weight[:8] * expected[:8]).sum(dim=(1, 2, 3))).repeat(2)
    torch.testing.assert_close(whiten.weight, expected * signs.view(-1, 1, 1, 1))


@pytest.mark.parametrize("shape", [(0, 3, 8, 8), (4, 3, 1, 8), (4, 3, 8, 1)])
def test_whitening_refuses_no_images_or_images_too_small_for_a_patch(shape):
    with pytest.raises(TrickLabError, match="at least 2×2 pixels"):
        PatchWhitening(in_channels=3).init_from_data(torch.randn(shape))


def test_dirac_init_makes_conv_an_identity_on_its_input_channels():
    conv = dirac_init_(nn.Conv2d(4, 8, kernel_size=3, padding=1))
    x = torch.randn(2, 4, 9, 9)
    with torch.no_grad():
        torch.testing.assert_close(conv(x)[:, :4], x)


def test_airbench_convs_start_dirac_initialised():
    group_conv = build_model("airbench", num_classes=10).groups[1].convs[1]
    x = torch.randn(1, group_conv.in_channels, 5, 5)
    with torch.no_grad():
        torch.testing.assert_close(group_conv(x)[:, : group_conv.in_channels], x)


def test_airbench_batchnorm_scale_is_not_trainable_but_bias_is():
    model = build_model("airbench", num_classes=10)
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert norms
    assert all(id(n.weight) not in trainable and id(n.bias) in trainable for n in norms)


def test_airbench_logits_are_scaled_by_one_ninth():
    torch.manual_seed(0)
    scaled = airbench(num_classes=10, width=0.25).eval()
    unscaled = airbench(num_classes=10, width=0.25, logit_scale=1.0).eval()
    unscaled.load_state_dict(scaled.state_dict())
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(scaled(x), unscaled(x) / 9)


def test_resnet9_logits_are_scaled_by_one_eighth():
    model = build_model("resnet9", num_classes=10, width=0.25).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        unscaled = model.head(model.pool(model.features(x)).flatten(1))
        torch.testing.assert_close(model(x), unscaled * 0.125)


def test_residual_group_passes_its_first_block_through_when_the_rest_is_zero():
    group = ConvGroup(4, 6, depth=3, residual=True).eval()
    with torch.no_grad():
        for conv in group.convs[1:]:
            conv.weight.zero_()
        x = torch.randn(2, 4, 8, 8)
        first_block = group.activation(group.norms[0](group.pool(group.convs[0](x))))
        torch.testing.assert_close(group(x), group.activation(first_block))


def test_airbench_residual_has_three_convs_per_group():
    model = build_model("airbench-residual", num_classes=10)
    assert [len(group.convs) for group in model.groups] == [3, 3, 3]
    assert all(group.residual for group in model.groups)


def test_width_scales_every_stage():
    model = build_model("resnet18", num_classes=10, width=0.5)
    assert model.stem[0].out_channels == 32
    assert model.head.in_features == 256


def test_widths_set_the_stages_outright():
    model = build_model("airbench", num_classes=10, widths=[8, 16, 24])
    assert [group.convs[0].out_channels for group in model.groups] == [8, 16, 24]


def test_widths_of_the_wrong_length_raise():
    with pytest.raises(TrickLabError, match="3 positive integers"):
        build_model("airbench", num_classes=10, widths=[8, 16])


def test_width_on_a_model_without_a_multiplier_raises():
    with pytest.raises(TrickLabError, match="'alexnet' does not take 'width'"):
        build_model("alexnet", num_classes=10, width=0.5)


def test_unknown_model_name_suggests_the_closest_one():
    with pytest.raises(TrickLabError, match="did you mean 'resnet18'") as info:
        build_model("resnet-18", num_classes=10)
    assert all(name in str(info.value) for name in MODELS)


def test_pretrained_on_an_own_implementation_raises():
    with pytest.raises(TrickLabError, match="no pretrained weights exist for 'airbench'"):
        build_model("airbench", num_classes=10, pretrained=True)


def test_pretrained_at_another_width_raises():
    with pytest.raises(TrickLabError, match="only at width 1.0"):
        build_model("mobilenetv2", num_classes=10, width=0.5, pretrained=True)


def test_pretrained_offline_raises_naming_the_hub_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)

    def offline(url, *args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    with pytest.raises(TrickLabError, match="could not download") as info:
        build_model("squeezenet", num_classes=10, pretrained=True)
    assert torch.hub.get_dir() in str(info.value)
    assert "squeezenet1_1-" in str(info.value)
    assert capsys.readouterr() == (
        "",
        "",
    )  # torch.hub's "Downloading: ..." dropped: one line in all


def test_pretrained_loads_cached_weights_and_replaces_only_the_head(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    monkeypatch.setattr(zoo, "_check_hash", lambda *args: None)  # not torchvision's file
    weights = torchvision.models.MobileNet_V2_Weights.DEFAULT
    torch.manual_seed(1)
    imagenet_state = torchvision.models.mobilenet_v2().state_dict()
    checkpoints = tmp_path / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    torch.save(imagenet_state, checkpoints / weights.url.rsplit("/", 1)[-1])

    model = build_model("mobilenetv2", num_classes=10, pretrained=True)

    state = model.state_dict()
    kept = [k for k in imagenet_state if not k.startswith("classifier.")]
    assert all(torch.equal(state[k], imagenet_state[k]) for k in kept)
    assert state["classifier.1.weight"].shape == (10, 1280)


def test_corrupt_cached_weights_raise_naming_the_file_to_delete(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    monkeypatch.setattr(zoo, "_check_hash", lambda *args: None)  # not torchvision's file
    weights = torchvision.models.MobileNet_V2_Weights.DEFAULT
    checkpoints = tmp_path / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    cached = checkpoints / weights.url.rsplit("/", 1)[-1]
    cached.write_bytes(b"half a download")
    with pytest.raises(TrickLabError, match="cannot be loaded") as info:
        build_model("mobilenetv2", num_classes=10, pretrained=True)
    assert str(cached) in str(info.value) and "delete that file" in str(info.value)


def test_gray_input_conv_responds_like_the_rgb_conv_on_a_gray_image():
    rgb = nn.Conv2d(3, 8, kernel_size=3, padding=1)
    gray = adapt_input_channels(rgb, 1, keep_weights=True)
    x = torch.randn(2, 1, 6, 6)
    with torch.no_grad():
        torch.testing.assert_close(gray(x), rgb(x.expand(-1, 3, -1, -1)))


# ---------------------------------------------------------------- `tricklab models` with overrides


def test_models_command_takes_the_overrides_profile_model_takes(capsys):
    from tricklab.cli.main import main
    from tricklab.measure.flops import count_params

    assert main(["models", "vgg16-bn", "model.width=0.25", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    narrow = build_model("vgg16-bn", num_classes=10, width=0.25)
    assert (row["name"], row["params"]) == ("vgg16-bn", count_params(narrow))


def test_models_command_counts_macs_at_the_image_size_given(capsys):
    from tricklab.cli.main import main

    words = ["models", "airbench", "model.widths=[8,16,16]"]
    assert main([*words, "--json"]) == 0
    at_32 = json.loads(capsys.readouterr().out)[0]["forward_macs"]
    assert main([*words, "data.image_size=16", "--json"]) == 0
    at_16 = json.loads(capsys.readouterr().out)[0]["forward_macs"]
    assert at_16 < at_32


def test_models_command_refuses_an_override_it_cannot_apply_in_one_line(capsys):
    from tricklab.cli.main import main

    assert main(["models", "airbench", "optim.lr=1"]) == 2
    err = capsys.readouterr().err
    assert "models takes overrides of model.width, model.widths, data.image_size" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_the_global_max_pool_is_the_adaptive_max_pool(memory_format):
    """GlobalMaxPool (a flattened max with indices) gives nn.AdaptiveMaxPool2d(1)'s values and
    gradient: a faster kernel on a GPU, not another model."""
    torch.manual_seed(0)
    x = torch.randn(4, 8, 3, 3).to(memory_format=memory_format).requires_grad_()
    ours, theirs = GlobalMaxPool()(x), nn.AdaptiveMaxPool2d(1)(x)
    assert ours.shape == theirs.shape == (4, 8, 1, 1)
    assert torch.equal(ours, theirs)
    grad = torch.randn_like(theirs)
    ours_grad, theirs_grad = (torch.autograd.grad(y, x, grad)[0] for y in (ours, theirs))
    assert torch.equal(ours_grad, theirs_grad)
    assert all(
        isinstance(m.pool, GlobalMaxPool)
        for m in (airbench(num_classes=10), resnet9(num_classes=10))
    )


def test_the_global_max_pool_compiled_in_float16_keeps_a_finite_gradient():
    """Compiled, float16, after conv -> max-pool -> GELU as in the net: inductor recomputes the
    GELU in the backward at a higher precision, so an amax pool's mask (input == maximum) came out
    empty and every gradient below the pool NaN (speedrun94 compiled diverged at step 2, 2026-11-26).
    GlobalMaxPool's backward follows the forward's indices: compiled, the gradients are eager's."""
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 16, 3, padding=1, bias=False).half().to(memory_format=torch.channels_last)
    net = nn.Sequential(conv, nn.MaxPool2d(2), nn.GELU(), GlobalMaxPool(), nn.Flatten())
    x = torch.randn(32, 16, 6, 6).half().to(memory_format=torch.channels_last)
    grads = []
    for forward in (net, torch.compile(net)):
        conv.zero_grad()
        forward(x).float().sum().backward()
        grads.append(conv.weight.grad.clone())
    assert torch.isfinite(grads[1]).all()
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-2, atol=1e-2)


def test_the_global_max_pool_gives_a_tied_maximum_its_gradient_once():
    """Where positions tie for a channel's maximum (GELU's zeros, ReLU's), the gradient goes to one
    of them, as the adaptive pool's; amax split it between them."""
    x = torch.zeros(2, 3, 3, 3, requires_grad=True)
    grad = torch.randn(2, 3, 1, 1)
    (ours,) = torch.autograd.grad(GlobalMaxPool()(x), x, grad)
    assert torch.equal((ours != 0).flatten(2).sum(2), torch.ones(2, 3, dtype=torch.long))
    torch.testing.assert_close(ours.sum((2, 3), keepdim=True), grad)


def test_an_image_too_small_on_either_side_is_refused_naming_both_sides():
    """Seventh hostile round: 64x1 images passed (the model was sized from the height) and failed
    mid-run with a traceback; 8 high by 64 wide was called 8x8."""
    from tricklab.models import check_image_size

    check_image_size("airbench", 9, 9)
    for height, width in ((64, 1), (8, 64)):
        with pytest.raises(TrickLabError, match=f"at least 9×9 pixels, got {height}×{width}"):
            check_image_size("airbench", height, width)


def test_training_on_images_one_pixel_wide_is_one_line_before_the_run(tmp_path):
    from PIL import Image

    import tricklab

    for split in ("train", "test"):
        for name in ("a", "b"):
            folder = tmp_path / "tall" / split / name
            folder.mkdir(parents=True)
            for i in range(2):
                Image.new("RGB", (1, 64)).save(folder / f"{i}.png")
    recipe = tricklab.load_recipe(
        "speedrun94", ["data.name=imagefolder", f"data.dir={tmp_path / 'tall'}",
                       f"data.cache_dir={tmp_path / 'cache'}", "model.widths=[8,16,16]",
                       "tricks.precision=32-true", "loader.batch_size=4"]
    )  # fmt: skip
    with pytest.raises(TrickLabError, match="got 64×1 \\(height×width\\)"):
        tricklab.train(recipe, out_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
