"""benchmarks/pool_kernels.py times airbench's pools as PyTorch's kernels and as amax; its
alternatives must compute the same pools, or its timings compare different things."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

import pool_kernels  # noqa: E402


def test_every_alternative_computes_the_same_pool_on_the_nets_shapes():
    result = pool_kernels.measure(2, torch.device("cpu"), repeats=1, blocks=1)
    rows = result["microseconds"]
    assert list(rows) == ["group1 64x31x31", "group2 256x15x15", "group3 256x7x7", "final 256x3x3"]
    for row in rows.values():
        assert all(cell["same_values"] for cell in row.values()), row
        assert all(cell["us"] > 0 for cell in row.values())


def test_the_amax_pool_keeps_channels_last_and_max_pools_gradient_without_ties():
    x = torch.randn(2, 8, 7, 9).to(memory_format=torch.channels_last).requires_grad_()
    ours, theirs = pool_kernels.amax_pool_2x2(x), F.max_pool2d(x, 2)
    assert ours.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(ours, theirs)
    grad = torch.randn_like(theirs)
    assert torch.equal(*(torch.autograd.grad(y, x, grad)[0] for y in (ours, theirs)))


def test_the_global_pool_with_indices_is_the_adaptive_pool_in_values_and_gradient():
    x = torch.randn(4, 8, 3, 3).to(memory_format=torch.channels_last).requires_grad_()
    ours, theirs = pool_kernels.GLOBAL["global_indices"](x), F.adaptive_max_pool2d(x, 1)
    assert torch.equal(ours, theirs)
    grad = torch.randn_like(theirs)
    assert torch.equal(*(torch.autograd.grad(y, x, grad)[0] for y in (ours, theirs)))
