"""Your own model (`package.module:factory`, `register_model`, `timm:NAME`): its module imported,
its factory called, and what the factory returned checked, behind core/usercode's wall; each
mistake is one TrickLabError line naming the model."""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping

import torch
from torch import nn

from tricklab.core.errors import TrickLabError
from tricklab.core.usercode import checked_user_code, described, user_code

TIMM_PREFIX = "timm:"


def building_on_meta() -> bool:
    """Whether models are built on the meta device now (the memory estimate's shapes-only build)."""
    return torch.empty(()).device.type == "meta"


def build_own(
    name: str,
    factory: Callable[..., nn.Module],
    *,
    num_classes: int,
    in_channels: int,
    image_size: int,
    **options: object,
) -> nn.Module:
    """`factory` called with those of num_classes, in_channels, image_size (and `options`: timm's
    pretrained) it takes; what it raises or returns other than an nn.Module is a TrickLabError.

    On the meta device its exceptions pass as they are: a factory that needs real storage (one
    that loads its own weights) is not a user mistake; the memory estimate skips such a model."""
    given = dict(num_classes=num_classes, in_channels=in_channels, image_size=image_size)
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a callable without a signature (some C functions)
        parameters = None
    if parameters is not None and not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        if "num_classes" not in parameters:
            raise TrickLabError(
                f"model {name}: its factory must take num_classes (and may take in_channels, "
                f"image_size); it takes ({', '.join(parameters)})"
            )
        given = {key: value for key, value in given.items() if key in parameters}
    try:
        with user_code(f"model {name}: its factory"):
            model = factory(**given, **options)
    except (TrickLabError, torch.cuda.OutOfMemoryError):
        raise  # a device out of memory: the run records it (oom)
    except Exception as err:  # a MemoryError too: no host memory to build it, one line
        if building_on_meta():
            raise
        who = "timm.create_model" if name.startswith(TIMM_PREFIX) else "its factory"
        raise TrickLabError(f"model {name}: {who} raised {described(err)}") from err
    if not isinstance(model, nn.Module):
        if inspect.iscoroutine(model):  # an async factory's: closed, no warning after the line
            model.close()
        raise TrickLabError(
            f"model {name}: its factory returned {type(model).__name__}, not a torch.nn.Module"
        )
    check_returned(model, name)
    return model


def check_returned(model: nn.Module, name: str, by: str = "its factory returned") -> None:
    """TrickLabError for a model that could not train as `by` says it came (its factory returned
    it, its init_from_data left it): parameters or buffers that are no tensors, a module among
    its own submodules (`.to()` would recurse without end), a state_dict() that raises or
    holds none of its weights (EMA and checkpoints read it), tensors on the meta device or other than float32; and after its
    init_from_data, no trainable parameter (the factory's model: training/preflight asks)."""
    with checked_user_code(f"model {name}: its parameters()"):
        params, buffers = [*model.parameters()], [*model.buffers()]
    tensors = params + buffers
    odd = next((t for t in tensors if not isinstance(t, torch.Tensor)), None)
    if odd is not None:
        raise TrickLabError(
            f"model {name}: its parameters() or buffers() give {type(odd).__name__}, not tensors"
        )
    if _holds_itself(model):
        raise TrickLabError(f"model {name}: {by} a model holding itself among its submodules "
                            "(such as self.me = self); keep such a reference out of it")  # fmt: skip
    with checked_user_code(f"model {name}: its state_dict()"):
        state = model.state_dict()
        values = [*state.values()] if isinstance(state, Mapping) else []
    if params and not any(isinstance(v, torch.Tensor) and v.is_floating_point() for v in values):
        raise TrickLabError(f"model {name}: its state_dict() gives {type(state).__name__} without "
                            "its weights; it must map names to tensors (EMA, checkpoints)")  # fmt: skip
    if not building_on_meta() and any(t.is_meta for t in tensors):
        raise TrickLabError(f"model {name}: {by} a model on the meta device "
                            "(shapes without storage); build it with real tensors")  # fmt: skip
    kinds = {str(t.dtype) for t in tensors if t.is_floating_point() and t.dtype != torch.float32}
    if kinds:
        raise TrickLabError(f"model {name}: {by} {', '.join(sorted(kinds))} weights; build it "
                            "in float32 (tricks.precision casts them)")  # fmt: skip
    if by != "its factory returned" and not any(p.requires_grad for p in params):
        raise TrickLabError(f"model {name}: {by} a model with no trainable parameter")


def _holds_itself(model: nn.Module) -> bool:
    """Whether a module is among its own submodules, at any depth."""
    done, path = set(), set()

    def visit(module: nn.Module) -> bool:
        if id(module) in path:
            return True
        if id(module) in done:
            return False
        path.add(id(module))
        found = any(visit(m) for m in module._modules.values() if isinstance(m, nn.Module))
        path.discard(id(module))
        done.add(id(module))
        return found

    return visit(model)


def import_factory(spec: str) -> Callable[..., nn.Module]:
    """The callable `package.module:attribute` names, imported now.

    A module in the current folder is found too, as `python -m` would find it: the `tricklab`
    command's own folder is on sys.path, the current one is not, so it is appended (last, so it
    shadows no installed package) when the module is found nowhere else."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise TrickLabError(f"model.name={spec!r}: give package.module:factory, both parts")
    try:
        with user_code(f"model.name={spec}: importing {module_name}"):
            module = _import_module(module_name)
    except TrickLabError:
        raise
    except ModuleNotFoundError as err:
        missing = err.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            raise TrickLabError(
                f"model.name={spec}: no module named {missing!r} (searched the current folder "
                f"{os.getcwd()} and the installed packages); check the name, install it, or "
                "add its folder to PYTHONPATH"
            ) from None
        raise TrickLabError(
            f"model.name={spec}: importing {module_name} failed: it needs {missing!r}, "
            "which is not installed"
        ) from err
    except Exception as err:  # SyntaxError, and anything the module raises while importing
        raise TrickLabError(
            f"model.name={spec}: importing {module_name} failed: {type(err).__name__}: {err}"
        ) from err
    target: object = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            names = [n for n in dir(target) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TrickLabError(
                f"model.name={spec}: {module_name} has no attribute {attribute!r}{hint}"
            )
        target = getattr(target, part)
    if not callable(target):
        raise TrickLabError(
            f"model.name={spec}: {attribute} is a {type(target).__name__}, not a callable "
            "that builds a model"
        )
    return target


def _import_module(module_name: str) -> object:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        top = module_name.split(".")[0]
        here = os.getcwd()
        if err.name != top or here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as again:
            if again.name == top:  # not in the current folder either: leave sys.path as it was
                sys.path.remove(here)
            raise
