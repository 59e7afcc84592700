"""benchmarks/step_kernels.py at a tiny size: tricklab's training step dispatches no more ATen
operators than airbench94's own, in each precision, and casts each weight at most once a step."""

import argparse
import sys
from pathlib import Path

import pytest

pytest.importorskip("airbench")
sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
import step_kernels  # noqa: E402

TINY = argparse.Namespace(width=0.0625, batch=8, image_size=32)  # airbench pools to 1x1 from 32


@pytest.mark.parametrize("precision", step_kernels.PRECISIONS)
def test_speedrun94s_step_dispatches_no_more_operators_than_airbench94s(precision):
    ours = step_kernels.tricklab_counts("speedrun94", precision, TINY)
    theirs = step_kernels.airbench_counts(precision, TINY)
    assert ours["total"] <= theirs["total"], (ours, theirs)
    # the same network, but for the global pool: GlobalMaxPool's flatten and unsqueeze around its
    # max are views, operators that launch no kernel
    assert ours["forward"] <= theirs["forward"] + 2
    assert ours["weight_casts"] <= theirs["weight_casts"]


def test_a_step_casts_each_weight_at_most_once():
    counts = step_kernels.tricklab_counts("speedrun94", "bf16-mixed", TINY)
    weights = 9  # the whitening conv's weight and bias, six convs' weights and the head's
    assert 0 < counts["weight_casts"] <= weights
    assert step_kernels.tricklab_counts("speedrun94", "16-true-bn32", TINY)["weight_casts"] == 0
