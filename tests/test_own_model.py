"""Your own model: register_model, model.name=package.module:factory, model.name=timm:NAME."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny_recipe import TINY_SYNTHETIC
from torch import nn

import tricklab
from tricklab import models
from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.models import build_model, get_model_info, list_models, register_model
from tricklab.recipe.schema import load_recipe
from tricklab.training.api import train

# A plain model: no whitening, no airbench options; one epoch on 256 synthetic 16x16 images.
TINY = [
    *(o for o in TINY_SYNTHETIC if not o.startswith("model.")),
    "run.epochs=1",
    "optim.lr=0.05",
]

MODULE = '''
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes, in_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.head(self.bn(self.conv(x)).relu().mean(dim=(2, 3)))


def make(num_classes, in_channels, image_size):
    """A one-conv net for the tests."""
    assert image_size == 16, image_size
    return Net(num_classes, in_channels)


def make_classes_only(num_classes):
    return Net(num_classes, 3)


def make_nothing(num_classes, in_channels, image_size):
    return "not a module"


def make_broken(num_classes, in_channels, image_size):
    raise ValueError("width must be even")


def make_without_classes(in_channels, image_size):
    return Net(10, in_channels)


class Registry:
    @staticmethod
    def make(num_classes, in_channels, image_size):
        return Net(num_classes, in_channels)


factory_count = 3
'''


def one_conv(num_classes: int, in_channels: int, image_size: int) -> nn.Module:
    """A conv, a pool and a head."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 4, 3, padding=1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, num_classes),
    )


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry for the test to change."""
    monkeypatch.setattr(models, "MODELS", dict(models.MODELS))
    return models.MODELS


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """`usermodels.py` importable as the user's own module."""
    (tmp_path / "usermodels.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "usermodels"
    sys.modules.pop("usermodels", None)


def test_a_registered_model_trains(registry):
    assert "register_model" in tricklab.__all__
    tricklab.register_model("one-conv", one_conv)
    result = train(load_recipe(None, [*TINY, "model.name=one-conv"]))
    assert result.status == "complete" and result.epochs_completed == 1
    assert result.params == sum(p.numel() for p in one_conv(10, 3, 16).parameters())


def test_a_module_factory_model_trains(user_module):
    result = train(load_recipe(None, [*TINY, f"model.name={user_module}:make"]))
    assert result.status == "complete" and result.epochs_completed == 1
    assert result.recipe["model"]["name"] == "usermodels:make"
    assert result.params == (3 * 9 * 8 + 8) + 2 * 8 + (8 * 10 + 10)


def test_a_factory_is_called_once_on_the_meta_device_and_once_per_run(registry):
    # was: three calls per run (the memory checks built it twice on the meta device)
    devices = []

    def counted(num_classes, in_channels, image_size):
        devices.append(torch.empty(0).device.type)
        return one_conv(num_classes, in_channels, image_size)

    tricklab.register_model("counted-conv", counted)
    recipe = load_recipe(None, [*TINY, "model.name=counted-conv", "model.width=1.0"])
    for expected in (["meta", "cpu"], ["meta", "cpu", "cpu"]):  # the second run: meta kept
        assert train(recipe).status == "complete"
        assert devices == expected
    tricklab.register_model("counted-conv", lambda num_classes: counted(num_classes, 3, 16))
    assert train(recipe).status == "complete"  # another factory under the name: built anew
    assert devices == ["meta", "cpu", "cpu", "meta", "cpu"]


def test_a_factory_gets_only_the_arguments_it_takes(user_module):
    model = build_model(f"{user_module}:make_classes_only", num_classes=7, image_size=16)
    assert model.head.out_features == 7


def test_an_attribute_path_names_a_factory_inside_a_class(user_module):
    model = build_model(f"{user_module}:Registry.make", num_classes=5, in_channels=1)
    assert model.conv.in_channels == 1 and model.head.out_features == 5


def test_a_module_in_the_current_folder_is_found(tmp_path, monkeypatch):
    # as the `tricklab` command starts: its own bin folder first, the current folder absent
    (tmp_path / "herenet.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        info = get_model_info("herenet:make")
    finally:
        sys.modules.pop("herenet", None)
    assert info.doc == "A one-conv net for the tests." and sys.path[-1] == str(tmp_path)


@pytest.mark.parametrize(
    "name, message",
    [
        ("nosuchpackage_xyz:make", "no module named 'nosuchpackage_xyz'"),
        ("usermodels.sub:make", "no module named 'usermodels.sub'"),
        ("usermodels:mak", "usermodels has no attribute 'mak'; did you mean 'make'?"),
        ("usermodels:factory_count", "factory_count is a int, not a callable"),
        ("usermodels:make_broken", "its factory raised ValueError: width must be even"),
        ("usermodels:make_nothing", "its factory returned str, not a torch.nn.Module"),
        ("usermodels:make_without_classes", "its factory must take num_classes"),
    ],
    ids=["no-module", "no-submodule", "no-attribute", "not-callable", "raises", "not-a-module",
         "no-num-classes"],
)  # fmt: skip
def test_a_bad_factory_is_one_line(user_module, name, message):
    with pytest.raises(TrickLabError) as info:
        build_model(name, num_classes=10, image_size=16)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_module_that_fails_to_import_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "brokenmodels.py").write_text("import nosuchdependency_xyz\n")
    (tmp_path / "typomodels.py").write_text("def make(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TrickLabError, match="it needs 'nosuchdependency_xyz', which is not"):
        get_model_info("brokenmodels:make")
    with pytest.raises(TrickLabError, match="importing typomodels failed: SyntaxError"):
        get_model_info("typomodels:make")


def test_a_bad_factory_stops_an_ablation_before_its_first_run(user_module, tmp_path, capsys):
    args = ["ablate", "--baseline", *TINY, f"model.name={user_module}:make_broken"]
    args += ["--vary", "tricks.label_smoothing=0.1", "--out", str(tmp_path / "exp")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "its factory raised ValueError: width must be even" in err[0], err
    assert not (tmp_path / "exp").exists()


def test_a_trick_that_needs_the_whitening_layer_is_refused_on_a_model_without_it(user_module):
    recipe = load_recipe(
        None, [*TINY, f"model.name={user_module}:make", "model.whiten_bias_epochs=1"]
    )
    with pytest.raises(TrickLabError, match="has none; set model.whiten_bias_epochs=0"):
        train(recipe)


def test_bn_momentum_on_a_model_without_batchnorm_is_refused(registry):
    register_model("one-conv", one_conv)
    recipe = load_recipe(None, [*TINY, "model.name=one-conv", "model.bn_momentum=0.4"])
    with pytest.raises(TrickLabError, match="has no BatchNorm layer"):
        train(recipe)


def test_width_and_pretrained_on_your_own_model_are_refused(registry):
    register_model("one-conv", one_conv)
    with pytest.raises(TrickLabError, match="set its size in the factory"):
        build_model("one-conv", num_classes=10, width=0.5)
    with pytest.raises(TrickLabError, match="load your weights in the factory"):
        build_model("one-conv", num_classes=10, pretrained=True)


@pytest.mark.parametrize(
    "name, factory, message",
    [
        ("resnet18", one_conv, "one of tricklab's own models"),
        ("mine:make", one_conv, "without ':'"),
        ("", one_conv, "non-empty"),
        ("mine", "one_conv", "needs a callable"),
        ("mine\nforged", one_conv, "control characters"),  # fifth hostile round
    ],
)
def test_register_model_refuses(registry, name, factory, message):
    with pytest.raises(TrickLabError, match=message):
        register_model(name, factory)


def test_register_model_takes_text_as_doc(registry):
    with pytest.raises(TypeError, match="doc takes str or None"):
        register_model("mine", one_conv, doc=5)


def test_registering_a_name_again_replaces_it(registry):
    register_model("mine", one_conv, doc="first")
    register_model("mine", one_conv, doc="second")
    assert [m.doc for m in list_models() if m.name == "mine"] == ["second"]


def test_tricklab_models_lists_registered_models(registry, capsys):
    register_model("one-conv", one_conv)
    assert list_models()[-1].name == "one-conv"
    assert main(["models", "one-conv", "resnet9", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["source"]) for r in rows] == [
        ("one-conv", "registered"),
        ("resnet9", "tricklab"),
    ]
    assert rows[0]["doc"] == "A conv, a pool and a head."
    assert rows[0]["params"] == sum(p.numel() for p in one_conv(10, 3, 32).parameters())


def test_a_recipe_takes_own_and_timm_names_without_importing_torch():
    code = (
        "import sys\n"
        "from tricklab.recipe.schema import load_recipe\n"
        "for name in ('pkg.mod:make', 'pkg:Cls.build', 'timm:resnet18'):\n"
        "    assert load_recipe(None, ['model.name=' + name]).model.name == name\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", ["pkg.:make", ":make", "pkg:", "pkg:1make", "a b:c"])
def test_a_recipe_refuses_a_malformed_reference(name):
    with pytest.raises(TrickLabError, match="package.module:factory or timm:NAME"):
        load_recipe(None, [f"model.name='{name}'"])


def test_timm_missing_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "timm", None)  # `import timm` raises ImportError
    with pytest.raises(TrickLabError, match=r"pip install 'tricklab\[timm\]'"):
        build_model("timm:resnet18", num_classes=10)
    assert main(["models", "timm:resnet18"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tricklab[timm]" in err[0]


def test_a_real_timm_model_trains():
    timm = pytest.importorskip("timm")
    arch = "test_resnet" if timm.is_model("test_resnet") else "resnet18"
    model = build_model(f"timm:{arch}", num_classes=7, in_channels=1, image_size=16)
    assert model(torch.randn(2, 1, 16, 16)).shape == (2, 7)
    with pytest.raises(TrickLabError, match=f"timm has no model '{arch}x'"):
        build_model(f"timm:{arch}x", num_classes=7)
    with pytest.raises(TrickLabError, match="timm models take no 'width'"):
        build_model(f"timm:{arch}", num_classes=7, width=0.5)
    result = train(load_recipe(None, [*TINY, f"model.name=timm:{arch}"]))
    assert result.status == "complete" and result.epochs_completed == 1


def test_a_timm_transformer_gets_the_image_size():
    timm = pytest.importorskip("timm")
    if not timm.is_model("test_vit"):
        pytest.skip("this timm has no test_vit")
    model = build_model("timm:test_vit", num_classes=3, image_size=16)
    assert model(torch.randn(2, 3, 16, 16)).shape == (2, 3)


def test_example_module_builds_for_cifar_and_mnist_shapes(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))  # the repository root
    for channels, size in ((3, 32), (1, 28), (3, 8)):
        model = build_model(
            "examples.my_model:make", num_classes=10, in_channels=channels, image_size=size
        )
        assert model(torch.randn(2, channels, size, size)).shape == (2, 10)


SCRIPT_MODULE = """
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", required=True)
parser.parse_args()
def make(num_classes):
    raise AssertionError("never reached")
"""
ASKING_MODULE = """
answer = input("width? ")
def make(num_classes):
    raise AssertionError("never reached")
"""
EXITING_FACTORY = """
import sys
from torch import nn
print("building my model")
def make(num_classes):
    sys.exit(0)
def make_interrupting(num_classes):
    raise KeyboardInterrupt
def make_printing(num_classes):
    print("hello from the factory")
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))
"""


@pytest.mark.parametrize(
    "module, factory, message",
    [
        (SCRIPT_MODULE, "make", "importing trainscript called sys.exit(2) after printing 'usage:"),
        (EXITING_FACTORY, "make", "its factory called sys.exit(0)"),
        (EXITING_FACTORY, "make_interrupting", "its factory raised KeyboardInterrupt itself"),
        (ASKING_MODULE, "make", "importing trainscript read standard input (input()?)"),
    ],
    ids=["script-exits-at-import", "factory-exits-0", "factory-raises-ctrl-c", "asks-input"],
)
@pytest.mark.parametrize("command", ["train", "ablate"])
def test_user_code_that_exits_or_interrupts_is_one_line_and_leaves_nothing(
    tmp_path, module, factory, message, command
):
    """A training script named as a model module, or a factory that exits: one line, exit 2, no
    run folder (was: the script's usage text, a run recorded 'interrupted', or exit 0 silently)."""
    (tmp_path / "trainscript.py").write_text(module)
    overrides = [*TINY, f"model.name=trainscript:{factory}"]
    args = ["train", *overrides] if command == "train" else ["ablate", "--baseline", *overrides]
    args += ["--vary", "optim.lr=0.1"] if command == "ablate" else []
    out = subprocess.run(
        [sys.executable, "-m", "tricklab", *args, "--out", str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "out").exists() and out.stdout == ""


def test_what_user_code_prints_while_building_stays_out_of_the_output(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "printingmodels.py").write_text(EXITING_FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    model = build_model("printingmodels:make_printing", num_classes=10, image_size=8)
    assert isinstance(model, nn.Module)
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    "found", [signal.default_int_handler, signal.SIG_IGN, signal.SIG_DFL], ids=str
)
def test_a_ctrl_c_during_user_code_stays_a_ctrl_c(monkeypatch, found):
    """Without tricklab's handler (the Python API) a KeyboardInterrupt cannot be told from the
    user's Ctrl-C, so it passes, whatever handler the process started with (SIGINT is ignored in
    a background job: was taken for tricklab's); tricklab's own Interrupted always passes."""
    from tricklab.core.stopping import Interrupted
    from tricklab.core.usercode import user_code

    monkeypatch.setattr(signal, "getsignal", lambda signum: found)
    with pytest.raises(KeyboardInterrupt) as info, user_code("model x: its factory"):
        raise KeyboardInterrupt
    assert type(info.value) is KeyboardInterrupt
    with pytest.raises(Interrupted), user_code("model x: its factory"):
        raise Interrupted("interrupted")


def test_user_code_that_does_not_return_is_named_in_one_line_while_it_waits(
    tmp_path, monkeypatch, capsys
):
    """A module that waits at import (a lock, the network, a sleep): after NOTICE_SECONDS one
    line says which code tricklab waits for; it is not stopped, and finishes as it would."""
    from tricklab.core import usercode

    (tmp_path / "slowmodels.py").write_text(
        "import time\ntime.sleep(1.5)\nfrom torch import nn\n"
        "def make(num_classes):\n    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(usercode, "NOTICE_SECONDS", 0.3)
    model = build_model("slowmodels:make", num_classes=10, image_size=8)
    assert isinstance(model, nn.Module)
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "note: model.name=slowmodels:make: importing slowmodels has run 0 s without returning "
        "(waiting on a lock, the network, a sleep?); Ctrl-C stops it"
    ]


MODELS_LISTED = """
import time
from torch import nn


class Slow(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.head = nn.Linear(3, num_classes)

    def forward(self, x):
        time.sleep(1.0)
        return self.head(x.mean((2, 3)))


class Broken(Slow):
    def forward(self, x):
        raise ValueError("no forward today")


def slow(num_classes):
    return Slow(num_classes)


def broken(num_classes):
    return Broken(num_classes)
"""


def test_tricklab_models_walls_a_users_forward(tmp_path, monkeypatch, capsys):
    # third hostile round: a forward that hangs got no note, one that raises was a traceback
    from tricklab.core import usercode

    (tmp_path / "listedmodels.py").write_text(MODELS_LISTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(usercode, "NOTICE_SECONDS", 0.3)
    assert main(["models", "listedmodels:slow", "data.image_size=8", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)[0]["forward_macs"] > 0
    assert err.startswith("note: model.name=listedmodels:slow: its forward has run 0 s")
    assert main(["models", "listedmodels:broken", "data.image_size=8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: model.name=listedmodels:broken: its forward raised ValueError: no "
                   "forward today"]  # fmt: skip
