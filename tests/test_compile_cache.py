"""Compile once: torch.compile's caches in tricklab's cache folder, under a key that changes with
the code, torch and the device; values a study varies reuse the compiled step in one process."""

import os

import pytest
import torch
from tiny_recipe import TINY_SYNTHETIC
from torch._dynamo.utils import counters

from tricklab.recipe.schema import load_recipe
from tricklab.training import compile_cache
from tricklab.training.api import train

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("name", "changed"),
    [
        ("__version__", "999.0"),
        ("source_hash", lambda: "another source"),
        ("device_key", lambda device: "cuda-NVIDIA H100-sm90"),
    ],
)
def test_the_cache_folder_changes_with_the_code_and_the_device(
    monkeypatch, tmp_path, name, changed
):
    before = compile_cache.compile_cache_dir(CPU, tmp_path)
    monkeypatch.setattr(compile_cache, name, changed)
    assert compile_cache.compile_cache_dir(CPU, tmp_path) != before


def test_the_cache_folder_changes_with_torchs_version(monkeypatch, tmp_path):
    before = compile_cache.compile_cache_dir(CPU, tmp_path)
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert compile_cache.compile_cache_dir(CPU, tmp_path) != before


def test_the_same_code_and_device_find_the_same_folder(tmp_path):
    first = compile_cache.compile_cache_dir(CPU, tmp_path)
    assert compile_cache.compile_cache_dir(CPU, tmp_path) == first
    assert first.parent == tmp_path / "compile"


def test_a_compiled_run_keeps_torchs_caches_in_tricklabs_folder(
    monkeypatch, tmp_path, eager_compile
):
    monkeypatch.setenv("TRICKLAB_CACHE", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    recipe = load_recipe(None, [*TINY_SYNTHETIC, "tricks.compile=default", "run.epochs=1"])
    assert train(recipe).status == "complete"
    assert eager_compile == [str(compile_cache.compile_cache_dir(CPU, tmp_path))]
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # as it was before the run


def test_an_ablation_of_values_compiles_the_step_once(eager_compile):
    """lr, weight decay, label smoothing and EMA decay reach the step as the optimizer's and the
    loss's values, not as constants of the compiled graph: four configurations, one compile."""
    base = [*TINY_SYNTHETIC, "tricks.compile=default", "run.epochs=1", "data.train_size=128"]
    graphs = []
    for value in ("optim.lr=0.2", "optim.weight_decay=0.001", "tricks.label_smoothing=0.1",
                  "tricks.ema_decay=0.8"):  # fmt: skip
        assert train(load_recipe(None, [*base, value])).status == "complete"
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[0] > 0 and graphs == [graphs[0]] * 4  # the train and eval graphs, once
    assert not counters["recompiles"]
