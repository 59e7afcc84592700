"""A user's model behind the wall, from its factory to its forward (issue 29): what its code does
to the process (sys.exit, KeyboardInterrupt, other exits) and what would fail at the first step (no
parameter, the wrong output) is one line and exit 2 before the run, with nothing left; an exit
the code makes later, mid-run, is a failed run, never taken for a Ctrl-C."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tiny_recipe import TINY_SYNTHETIC

from tricklab.cli.main import main

TINY = [*(o for o in TINY_SYNTHETIC if not o.startswith("model.")), "run.epochs=1"]

MODULE = """
import sys
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes, outs=None):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, outs or num_classes)
        self.calls = 0

    def forward(self, x):
        return self.head(self.conv(x).relu().mean(dim=(2, 3)))


class ExitInForward(Net):
    def forward(self, x):
        sys.exit(5)


class InterruptInForward(Net):
    def forward(self, x):
        raise KeyboardInterrupt


class ExitInInit(Net):
    def init_from_data(self, images):
        sys.exit(9)


class ExitLater(Net):
    def forward(self, x):
        self.calls += 1
        if self.training and self.calls > 4:  # the checks' forwards pass, a training step exits
            sys.exit(3)
        return super().forward(x)


class NoParameters(nn.Module):
    def forward(self, x):
        return x.mean(dim=(2, 3)).repeat(1, 4)[:, :10]


def exit_in_forward(num_classes):
    return ExitInForward(num_classes)


def interrupt_in_forward(num_classes):
    return InterruptInForward(num_classes)


def exit_in_init(num_classes):
    return ExitInInit(num_classes)


def exit_later(num_classes):
    return ExitLater(num_classes)


def three_outputs(num_classes):
    return Net(num_classes, outs=3)


class InitRaises(Net):
    def init_from_data(self, images):
        raise RuntimeError("boom")


class EvalRaises(Net):
    def forward(self, x):
        if not self.training:
            raise ValueError("no eval")
        return super().forward(x)


class ParametersRaise(Net):
    def parameters(self, recurse=True):
        raise RuntimeError("params boom")


def init_raises(num_classes):
    return InitRaises(num_classes)


def eval_raises(num_classes):
    return EvalRaises(num_classes)


def parameters_raise(num_classes):
    return ParametersRaise(num_classes)


class InitLookupRaises(Net):
    def __getattr__(self, name):
        if name == "init_from_data":
            raise RuntimeError("getattr boom")
        return super().__getattr__(name)


def init_lookup_raises(num_classes):
    return InitLookupRaises(num_classes)


async def asynchronous(num_classes):
    return Net(num_classes)


def lazy(num_classes):
    return nn.Sequential(nn.LazyConv2d(8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.LazyLinear(num_classes))


def a_tuple(num_classes):
    net = Net(num_classes)
    forward = net.forward
    net.forward = lambda x: (forward(x), x)
    return net


def no_parameters(num_classes):
    return NoParameters()


def raises_generator_exit(num_classes):
    raise GeneratorExit("from a generator")


class UnreadableMessage(Exception):
    def __str__(self):
        raise RuntimeError("its __str__ fails")


def message_that_raises(num_classes):
    raise UnreadableMessage()


def out_of_host_memory(num_classes):
    raise MemoryError()


def moves_the_working_folder(num_classes):
    import os

    os.chdir("/")
    return Net(num_classes)


class IntegerScores(Net):
    def forward(self, x):
        return super().forward(x).long()


def integer_scores(num_classes):
    return IntegerScores(num_classes)


class NoGradient(Net):
    def forward(self, x):
        return x.new_zeros(len(x), self.head.out_features)


def no_gradient(num_classes):
    return NoGradient(num_classes)


def float64_weights(num_classes):
    return Net(num_classes).double()


def on_the_meta_device(num_classes):
    import torch

    with torch.device("meta"):
        return Net(num_classes)


def meta_by_default(num_classes):
    import torch

    torch.set_default_device("meta")  # and left so: every later tensor would have no storage
    return Net(num_classes)


def changes_the_process(num_classes):
    import os

    import torch

    torch.set_num_threads(1)
    torch.set_grad_enabled(False)  # the run's backward failed with a traceback
    torch.set_default_dtype(torch.float64)
    torch.use_deterministic_algorithms(True)
    torch.autograd.set_detect_anomaly(True)
    torch.set_float32_matmul_precision("medium")
    os.umask(0o777)  # every file the run wrote after it: mode 000
    return Net(num_classes).float()


def leaves_contexts_open(num_classes):
    import signal

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class PassThrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    net = Net(num_classes)
    torch.autocast("cpu", dtype=torch.bfloat16).__enter__()  # the run trained in bf16
    torch.device("meta").__enter__()  # every later tensor without storage: a traceback
    signal.alarm(3)  # a library's watchdog: SIGALRM killed the run 3 s later, without a word
    # sixth round: a sampling profiler's timer (SIGPROF killed it), a dispatch mode, a mask
    signal.setitimer(signal.ITIMER_PROF, 2, 0.5)
    PassThrough().__enter__()
    torch.set_autocast_cache_enabled(False)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    return net


class RaisesInTrainMode(Net):
    def forward(self, x):
        if self.training:
            raise RuntimeError("train mode unsupported")
        return super().forward(x)


def raises_in_train_mode(num_classes):
    return RaisesInTrainMode(num_classes)


class TupleInTraining(Net):  # as torchvision's Inception and GoogLeNet: (logits, aux)
    def forward(self, x):
        out = super().forward(x)
        return (out, out) if self.training else out


def tuple_in_training(num_classes):
    return TupleInTraining(num_classes)


class TwoRows(Net):
    def forward(self, x):
        return super().forward(x)[:2]


def two_rows(num_classes):
    return TwoRows(num_classes)


def writes_to_fd_2(num_classes):
    import os

    os.write(2, b"[noisy] a C extension's log line\\n")
    raise ValueError("no such variant")
"""


@pytest.fixture
def walled(tmp_path, monkeypatch):
    (tmp_path / "walledmodels.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "walledmodels"
    sys.modules.pop("walledmodels", None)


@pytest.mark.parametrize(
    ("factory", "says"),
    [
        ("exit_in_forward", "its forward called sys.exit(5)"),
        ("interrupt_in_forward", "its forward raised KeyboardInterrupt itself"),
        ("exit_in_init", "its init_from_data called sys.exit(9)"),
        ("three_outputs", "its forward gives (2, 3) for a batch of 2 images"),
        ("a_tuple", "its forward gives tuple"),
        ("no_parameters", "the model has no trainable parameter"),
        ("raises_generator_exit", "its factory raised GeneratorExit: from a generator"),
        # third hostile round: each was a traceback and exit 1, a failed run's folder left
        ("message_that_raises", "raised UnreadableMessage: (its message could not be read)"),
        ("out_of_host_memory", "its factory raised MemoryError"),
        ("moves_the_working_folder", "changed the working folder (os.chdir)"),
        ("integer_scores", "its forward gives torch.int64 scores"),
        ("no_gradient", "scores do not depend on the model's trainable parameters"),
        ("float64_weights", "its factory returned torch.float64 weights"),
        ("on_the_meta_device", "its factory returned a model on the meta device"),
        # fourth hostile round: set as the default device, meta outlived the factory
        ("meta_by_default", "its factory returned a model on the meta device"),
        # fifth hostile round: a traceback mid-run (exit 1), a failed run's folder left
        ("tuple_in_training", "its forward in train mode gives tuple for a batch of 3 images"),
        ("two_rows", "its forward in train mode gives (2, 10) for a batch of 3 images"),
        ("raises_in_train_mode", "its forward in train mode raised RuntimeError: train mode"),
        # eleventh hostile round: a traceback and exit 1, a failed run's folder left; a
        # coroutine's "never awaited" warning after the error line
        ("init_raises", "its init_from_data raised RuntimeError: boom"),
        ("eval_raises", "its forward raised ValueError: no eval"),
        ("parameters_raise", "its parameters() raised RuntimeError: params boom"),
        ("asynchronous", "its factory returned coroutine, not a torch.nn.Module"),
        ("init_lookup_raises", "raised RuntimeError: getattr boom"),
    ],
)
def test_what_the_models_code_does_is_one_line_before_the_run(
    walled, tmp_path, capsys, monkeypatch, factory, says
):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    assert main(["train", *TINY, f"model.name={walled}:{factory}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err, err
    assert not out.exists()
    assert Path.cwd() == tmp_path  # put back where the code moved it


@pytest.mark.parametrize("factory", ["out_of_host_memory", "message_that_raises"])
def test_an_ablations_dry_run_refuses_what_its_runs_would(walled, tmp_path, capsys, factory):
    # was: --dry-run passed a factory raising MemoryError or an unreadable exception
    args = ["ablate", "--baseline", *TINY, f"model.name={walled}:{factory}", "--dry-run"]
    args += ["--vary", "tricks.label_smoothing=0.1", "--out", str(tmp_path / "exp")]
    assert main(args) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "exp").exists()


def test_an_ablation_checks_the_models_forward_behind_the_wall_before_its_first_run(
    walled, tmp_path, capsys
):
    args = ["ablate", "--baseline", *TINY, f"model.name={walled}:exit_in_forward"]
    args += ["--vary", "tricks.label_smoothing=0.1", "--out", str(tmp_path / "exp"), "-q"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "sys.exit(5)" in err, err
    assert not (tmp_path / "exp").exists()


def test_an_exit_the_models_code_makes_mid_run_is_a_failed_run_not_a_ctrl_c(
    walled, tmp_path, capsys
):
    out = tmp_path / "run"
    code = main(["train", *TINY, f"model.name={walled}:exit_later", "--out", str(out)])
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "failed" and "sys.exit(3)" in result["error"], result["error"]
    assert code == 1  # a failed run, as any error of the model's code mid-run
    # ...and the same command runs again into the folder (a failed run is replaced)
    assert main(["train", *TINY, f"model.name={walled}:three_outputs", "--out", str(out)]) == 2


@pytest.mark.parametrize("what", ["a file", "a folder"])
def test_a_loggers_file_already_in_the_run_folder_is_refused_before_the_run(tmp_path, capsys, what):
    """metrics.csv appended to would hold two runs' rows under two headers."""
    out = tmp_path / "run"
    out.mkdir()
    if what == "a file":
        (out / "metrics.csv").write_text("JUNK,OLD\n1,2\n")
    else:
        (out / "metrics.csv").mkdir()
    args = ["train", *TINY_SYNTHETIC, "run.epochs=1", "run.loggers=[jsonl,csv]", "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "already holds a run (metrics.csv)" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["metrics.csv"]


def test_the_wall_puts_back_the_recursion_limit_and_the_stop_handlers():
    # third hostile round: a factory's sys.setrecursionlimit(25) crashed tricklab after it
    # returned, and its SIG_IGN made Ctrl-C do nothing for the rest of an ablation
    import signal

    from tricklab.core.usercode import user_code

    def ours(signum, frame):
        raise AssertionError("not called")

    limit = sys.getrecursionlimit()
    previous = {s: signal.signal(s, ours) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with user_code("model.name=m:f: its factory"):
            sys.setrecursionlimit(60)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        assert sys.getrecursionlimit() == limit
        assert signal.getsignal(signal.SIGINT) is ours and signal.getsignal(signal.SIGTERM) is ours
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        sys.setrecursionlimit(limit)


def _process_settings() -> tuple:
    import os

    import torch

    mask = os.umask(0o022)
    os.umask(mask)
    return (
        torch.get_num_threads(),
        torch.is_grad_enabled(),
        torch.get_default_dtype(),
        str(torch.get_default_device()),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_anomaly_enabled(),
        torch.get_float32_matmul_precision(),
        mask,
    )


def test_what_user_code_writes_to_file_descriptor_2_stays_out_of_the_one_line(
    walled, tmp_path, capfd
):
    """Fifth hostile round: the wall swapped sys.stderr only; a C extension's line (os.write to
    fd 2) came out twice above the error line."""
    out = tmp_path / "run"
    assert main(["train", *TINY, f"model.name={walled}:writes_to_fd_2", "--out", str(out)]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err == [
        f"error: model {walled}:writes_to_fd_2: its factory raised ValueError: no such variant"
    ]
    assert not out.exists()


def test_contexts_and_an_alarm_a_factory_leaves_open_are_closed_before_the_run(walled, tmp_path):
    """Fifth hostile round: an autocast left entered trained in bf16 while result.json said
    32-true; a `torch.device("meta")` left entered failed the run; an alarm killed it."""
    import signal

    import torch

    from tricklab.core.torchstate import autocast_depth

    out = tmp_path / "run"
    factory = f"model.name={walled}:leaves_contexts_open"
    assert main(["train", *TINY, factory, "--out", str(out), "--json"]) == 0
    assert json.loads((out / "result.json").read_text())["status"] == "complete"
    assert not torch.is_autocast_enabled("cpu")
    assert autocast_depth() == 0  # left entered, its cache of weight casts outlived every step
    assert torch._C._len_torch_function_stack() == 0
    assert torch._C._len_torch_dispatch_stack() == 0 and torch.is_autocast_cache_enabled()
    assert signal.getitimer(signal.ITIMER_REAL) == signal.getitimer(signal.ITIMER_PROF) == (0, 0)
    assert signal.SIGUSR2 not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_what_a_factory_changes_of_the_process_is_put_back_and_the_run_records_what_ran(
    walled, tmp_path, capsys
):
    """Fourth hostile round: a factory's torch.set_num_threads(1) trained on 1 thread while
    result.json said 2; set_grad_enabled(False) failed every run of an ablation with a traceback
    and exit 0; os.umask(0o777) made every file the run wrote unreadable."""
    before = _process_settings()
    out = tmp_path / "run"
    assert (
        main(["train", *TINY, f"model.name={walled}:changes_the_process", "--out", str(out)]) == 0
    )
    assert _process_settings() == before
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "complete"
    assert result["hardware"]["torch_threads"] == before[0]
    assert all(path.stat().st_mode & 0o600 == 0o600 for path in out.iterdir())


def test_the_wall_holds_where_no_temporary_file_can_be_made(walled, tmp_path, capsys, monkeypatch):
    """File descriptors 1 and 2 go to a temporary file; without one, sys.stdout/stderr alone."""
    import tempfile

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", no_space)
    out = tmp_path / "run"
    assert main(["train", *TINY, f"model.name={walled}:three_outputs", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "its forward gives (2, 3)" in err[0]
    assert not out.exists()


@pytest.mark.parametrize(
    ("factory", "says"),
    [("init_raises", "raised RuntimeError: boom"), ("eval_raises", "raised ValueError: no eval"),
     ("parameters_raise", "its parameters() raised RuntimeError: params boom")],
)  # fmt: skip
def test_profile_model_says_what_the_models_code_raised_in_one_line(walled, capsys, factory, says):
    """Eleventh hostile round: `profile model` over these was a traceback and exit 1."""
    args = ["profile", "model", f"{walled}:{factory}", "--batch-sizes", "2", "--repeats", "1",
            "--device", "cpu", "data.image_size=16"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err, err


def test_a_lazy_model_is_sized_at_its_first_forward_and_trains(walled, tmp_path, capsys):
    """Eleventh hostile round: LazyConv2d/LazyLinear failed the memory check (numel of an
    uninitialized parameter) with a traceback."""
    out = tmp_path / "run"
    assert main(["train", *TINY, f"model.name={walled}:lazy", "--out", str(out), "-q"]) == 0
    assert json.loads((out / "result.json").read_text())["status"] == "complete"
    args = ["profile", "model", f"{walled}:lazy", "--batch-sizes", "2", "--repeats", "1",
            "--device", "cpu", "data.image_size=16", "--json"]  # fmt: skip
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["models"][0]["params"] > 0
