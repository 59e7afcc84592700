"""FLOP, MAC and parameter counts match hand counts and published figures."""

from __future__ import annotations

from torch import nn

from tricklab.measure.flops import count_forward_flops, count_forward_macs, count_params
from tricklab.models import build_model


def _conv_then_linear() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 8 * 8, 10),
    )


def test_macs_of_a_conv_and_a_linear_match_the_hand_count():
    conv_macs = 8 * 3 * 3 * 3 * (8 * 8)  # out × in × kernel area × output pixels
    linear_macs = 8 * 8 * 8 * 10
    assert count_forward_macs(_conv_then_linear(), (1, 3, 8, 8)) == conv_macs + linear_macs


def test_flops_are_two_per_mac_and_scale_with_batch():
    model = _conv_then_linear()
    assert count_forward_flops(model, (4, 3, 8, 8)) == 4 * 2 * count_forward_macs(
        model, (1, 3, 8, 8)
    )


def test_cifar_resnet18_is_about_0_556_gmacs():
    model = build_model("resnet18", num_classes=10)
    assert abs(count_forward_macs(model, (1, 3, 32, 32)) / 0.556e9 - 1) < 0.02


def test_counting_restores_each_module_mode():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Dropout()).train()
    model[2].eval()
    count_forward_flops(model, (2, 3, 8, 8))
    assert [m.training for m in model.modules()] == [True, True, True, False]


def test_counting_leaves_batchnorm_statistics_unchanged():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, bias=True), nn.BatchNorm2d(4)).train()
    nn.init.constant_(model[0].bias, 5.0)
    count_forward_flops(model, (2, 3, 8, 8))
    assert model[1].running_mean.abs().max() == 0
    assert int(model[1].num_batches_tracked) == 0


def test_count_params_counts_all_parameters():
    conv = nn.Conv2d(3, 8, kernel_size=3)
    assert count_params(conv) == 8 * 3 * 3 * 3 + 8


def test_count_params_trainable_only_skips_frozen_ones():
    conv = nn.Conv2d(3, 8, kernel_size=3)
    conv.weight.requires_grad_(False)
    assert count_params(conv, trainable_only=True) == 8
