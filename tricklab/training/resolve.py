"""The recipe as it runs on a device: `tricks.compile: auto` and tricks.precision decided.

A run records what was decided (`RunResult.resolved`); the recipe it was given stays as written,
so the same recipe.yaml runs as its record did on a GPU and eagerly on a CPU."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from tricklab.recipe.schema import Recipe
from tricklab.recipe.sections import cuda_graph_refusal
from tricklab.training import distributed
from tricklab.training.precision import PrecisionPolicy, cuda_capability, resolve_precision

# What tricks.compile=auto compiles with on CUDA: the records' setting (airbench94_muon.py,
# airbench94_compiled.py: the model under torch.compile(mode="max-autotune")), and where the whole
# step is captured in tricklab's CUDA graph, max-autotune's kernels without its own CUDA graphs
# inside that one: speedrun94-muon 1.392 s record against 1.453 s with compile=default in the
# graph, airbench94_muon.py 1.967 s beside them (H200, torch 2.11, 2026-11-28, 5 interleaved rounds).
AUTO_COMPILE_ON_CUDA = "max-autotune"
AUTO_COMPILE_IN_GRAPH = "max-autotune-no-cudagraphs"


def compile_for_device(mode: str, device_type: str, graphed: bool = False) -> str:
    """tricks.compile as it runs: auto is max-autotune on CUDA (max-autotune-no-cudagraphs where
    `graphed`, the step in tricklab's CUDA graph) and off elsewhere (on a CPU, compiling these
    small nets costs more seconds than it saves); other modes as given."""
    if mode != "auto":
        return mode
    if device_type != "cuda":
        return "off"
    return AUTO_COMPILE_IN_GRAPH if graphed else AUTO_COMPILE_ON_CUDA


def for_device(
    recipe: Recipe, device: torch.device, capability: tuple[int, int] | None = None
) -> tuple[Recipe, PrecisionPolicy, dict[str, Any]]:
    """(the recipe with the device's choices in it, its precision policy, what was decided and
    why: the `resolved` a run records).

    `capability`: the CUDA compute capability, read from the device when not given."""
    if capability is None:
        capability = cuda_capability(device)
    t = recipe.tricks
    policy, note = resolve_precision(t.precision, device.type, capability, recipe.optim.name)
    notes = [note] if note else []
    # auto's kernels go inside the step's graph where it can run, else max-autotune's own graphs
    in_graph = compile_for_device(t.compile, device.type, graphed=True)
    graph, graph_note = cuda_graph_for_device(recipe, device.type, policy, in_graph)
    compile_mode = compile_for_device(t.compile, device.type, graphed=graph)
    notes += [graph_note] if graph_note else []
    tricks = dataclasses.replace(
        t, compile=compile_mode, precision=policy.name, cuda_graph="on" if graph else "off"
    )
    resolved = {
        "compile": compile_mode,
        "precision": policy.name,
        "cuda_graph": graph,
        "notes": notes,
    }
    return dataclasses.replace(recipe, tricks=tricks), policy, resolved


def cuda_graph_for_device(
    recipe: Recipe, device_type: str, policy: PrecisionPolicy, compile_mode: str = "off"
) -> tuple[bool, str | None]:
    """Whether tricks.cuda_graph runs (on, or auto where the step can be captured: a CUDA GPU,
    the recipe's step holdable, no GradScaler, one process, no compile mode that records CUDA
    graphs of its own), and the one line that says why it does not where `on` asked for it (auto
    says nothing). `compile_mode`: tricks.compile as it runs (`compile_for_device`)."""
    wanted = recipe.tricks.cuda_graph
    if wanted == "off":
        return False, None
    why = None
    if device_type != "cuda":
        why = f"CUDA graphs need a CUDA GPU (this run: {device_type})"
    elif compile_mode in ("reduce-overhead", "max-autotune"):
        why = f"tricks.compile={compile_mode} records CUDA graphs of its own"
    elif policy.grad_scaling:
        why = f"{policy.name} scales the loss with a GradScaler, which the graph does not hold"
    elif wanted == "auto" and (cuda_graph_refusal(recipe) or distributed.world().world_size > 1):
        return False, None
    if why is None:
        return True, None
    return False, (f"tricks.cuda_graph is off: {why}" if wanted == "on" else None)
