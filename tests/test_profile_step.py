"""`tricklab profile step`: Page's breakdown of a recipe's step. Components are differences of
interleaved variants, finite, clipped at zero, their shares summing to 1; the profiler's top
operators and a Chrome trace come with them; bad input is one line and exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from tiny_recipe import TINY_SYNTHETIC
from torch import nn

import tricklab
from tricklab.cli.main import main
from tricklab.core.errors import TrickLabError
from tricklab.profile.step import (
    profile_step,
    step_components,
    strip_batchnorm_and_activations,
    top_operators,
)

# EMA every 2 steps and flip TTA, so that every variant and the TTA evaluation run.
TINY_STEP = [*TINY_SYNTHETIC, "tricks.ema_decay=0.9", "tricks.ema_every=2", "tricks.tta=flip"]
KEYS = {
    "kind", "recipe", "device", "hardware", "batch_size", "repeats", "steps_per_sample",
    "variants", "step_ms", "components", "components_sum_ms", "inside_forward_backward",
    "replaced_modules", "compile_seconds", "evaluation", "profiled_steps", "top_operators",
    "trace", "params", "forward_macs", "recipe_resolved", "resolved",
}  # fmt: skip
COMPONENT_KEYS = {
    "name", "doc", "measured_as", "ms", "ms_raw", "ci_low_ms", "ci_high_ms", "within_noise", "share"
}  # fmt: skip


def samples_ms(**variants: list[float]) -> dict[str, list[float]]:
    return {name: [v / 1e3 for v in values] for name, values in variants.items()}


def test_components_are_differences_that_add_up_to_the_step():
    samples = samples_ms(
        full=[10.0, 10.2, 10.1, 9.9],
        no_loading=[8.0, 8.1, 8.0, 7.9],
        no_ema=[7.5, 7.6, 7.4, 7.5],
        forward_backward=[6.0, 6.1, 6.0, 5.9],
        forward=[2.0, 2.0, 2.1, 1.9],
        forward_backward_bare=[4.0, 4.1, 4.0, 3.9],
    )
    components, inside = step_components(samples)
    by_name = {c["name"]: c for c in components}
    assert list(by_name) == ["loading", "ema_update", "optimizer_step", "backward", "forward"]
    assert by_name["loading"]["ms"] == pytest.approx(10.05 - 8.0)
    assert by_name["backward"]["ms"] == pytest.approx(6.0 - 2.0)
    assert sum(c["ms"] for c in components) == pytest.approx(10.05)  # the full step's median
    assert sum(c["share"] for c in components) == pytest.approx(1)
    assert not any(c["within_noise"] for c in components)
    assert [c["name"] for c in inside] == ["batchnorm_and_activations", "rest_of_forward_backward"]
    assert inside[0]["ms"] == pytest.approx(2.0)
    for c in components + inside:
        assert set(c) == COMPONENT_KEYS
        assert c["ci_low_ms"] <= c["ms_raw"] <= c["ci_high_ms"]


def test_a_negative_component_is_clipped_at_zero_and_marked_within_noise():
    samples = samples_ms(
        full=[7.9, 7.0, 9.0, 8.0],  # loading costs nothing here: full ~ no_loading
        no_loading=[8.2, 8.0, 8.1, 7.0],
        forward_backward=[6.0, 6.1, 6.0, 5.9],
        forward=[2.0, 2.0, 2.1, 1.9],
    )
    components, inside = step_components(samples)
    loading = components[0]
    assert loading["name"] == "loading" and loading["ms_raw"] < 0
    assert loading["ms"] == 0 and loading["share"] == 0
    assert loading["within_noise"]
    assert [c["name"] for c in components][1] == "optimizer_step"  # no EMA, no ema_update row
    assert components[1]["measured_as"] == "no_loading - forward_backward"
    assert sum(c["share"] for c in components) == pytest.approx(1)
    assert inside == []


def test_a_part_inside_forward_backward_is_never_shown_larger_than_its_whole():
    """Eleventh hostile round: the bare copy measured slower than forward + backward (noise), and
    "rest of forward backward" read 5.86 ms, 97 % of the step, beside forward + backward's 5.45."""
    samples = samples_ms(
        full=[6.0, 6.1, 6.0, 5.9],
        no_loading=[6.0, 6.0, 6.0, 6.0],
        forward_backward=[5.4, 5.5, 5.4, 5.5],
        forward=[3.2, 3.2, 3.3, 3.2],
        forward_backward_bare=[5.9, 5.8, 5.9, 5.8],
    )
    components, inside = step_components(samples)
    whole = sum(c["ms"] for c in components if c["name"] in ("forward", "backward"))
    rest = inside[1]
    assert rest["ms_raw"] > whole and rest["ms"] == pytest.approx(whole)
    share = sum(c["share"] for c in components if c["name"] in ("forward", "backward"))
    assert rest["share"] == pytest.approx(share)
    assert inside[0]["ms"] == 0  # the bare copy slower: BatchNorm and activations cost 0 here


def test_stripping_replaces_batchnorm_and_activation_modules_by_identity():
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Sequential(nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4), nn.GELU()), nn.MaxPool2d(2),
    )  # fmt: skip
    replaced = strip_batchnorm_and_activations(net)
    assert replaced == {"BatchNorm2d": 2, "ReLU": 1, "GELU": 1}
    assert not any(isinstance(m, (nn.BatchNorm2d, nn.ReLU, nn.GELU)) for m in net.modules())
    assert isinstance(net[4], nn.MaxPool2d)
    assert net(torch.ones(1, 3, 10, 10)).shape == (1, 4, 3, 3)


def test_a_tiny_recipe_profiles_with_the_documented_keys_and_a_trace(tmp_path):
    trace = tmp_path / "step.json"
    recipe = tricklab.load_recipe(None, TINY_STEP)
    result = profile_step(recipe, recipe_name="tiny", repeats=2, trace=trace)
    assert set(result) == KEYS
    names = [c["name"] for c in result["components"]]
    assert names == ["loading", "ema_update", "optimizer_step", "backward", "forward"]
    for c in result["components"] + result["inside_forward_backward"]:
        assert all(isinstance(c[k], float) and c[k] == c[k] for k in ("ms", "ms_raw", "ci_low_ms"))
        # clipped at 0, and a part of forward + backward at most its whole (noise can say more)
        assert 0 <= c["ms"] <= max(c["ms_raw"], 0)
    for c in result["components"]:
        assert c["ms"] == max(c["ms_raw"], 0)
    assert sum(c["share"] for c in result["components"]) == pytest.approx(1, abs=1e-9)
    assert result["steps_per_sample"]["full"] % 2 == 0  # whole EMA periods per sample
    assert result["replaced_modules"]["GELU"] == 3 and result["batch_size"] == 64
    assert result["evaluation"]["images"] == 128 and result["evaluation"]["tta"] == "flip"
    assert result["evaluation"]["tta_seconds"] > 0
    ops = result["top_operators"]
    assert ops and all(o["self_cpu_ms_per_step"] >= 0 for o in ops)
    assert any("convolution" in o["name"] for o in ops)
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "tricklab.train_step" for e in events)
    assert not list(tmp_path.glob("*.tmp"))


def test_cli_json_prints_one_object(capsys):
    code = main(["profile", "step", *TINY_SYNTHETIC, "--repeats", "2", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(result) == KEYS | {"date"} and result["recipe"] is None  # the CLI dates it
    assert [c["name"] for c in result["components"]][1] == "optimizer_step"


def test_cli_table_shows_components_and_operators(capsys):
    assert main(["profile", "step", *TINY_SYNTHETIC, "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    for text in ("loading", "optimizer step", "batchnorm and activations", "top operators"):
        assert text in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["speedrun49"], "speedrun49"),
        (["speedrun94", "optim.lrr=1"], "optim.lr"),
        (["speedrun94", "loader.batch_size=0"], "loader.batch_size"),
        ([*TINY_SYNTHETIC, "--repeats", "1"], "repeats must be an integer >= 2"),
        ([*TINY_SYNTHETIC, "--trace", "no/such/folder/t.json"], "does not exist"),
        ([*TINY_SYNTHETIC, "--trace", ""], "--trace needs a file name"),
        ([*TINY_SYNTHETIC, "data.name=imagefolder", "data.dir=/no/such/dir"], "/no/such/dir"),
    ],
)
def test_cli_bad_recipe_key_or_option_is_one_line_and_exit_2(args, message, capsys):
    assert main(["profile", "step", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_bad_trace_folder_is_refused_before_any_work(tmp_path):
    recipe = tricklab.load_recipe(None, [*TINY_SYNTHETIC, "data.name=imagefolder", "data.dir=/x"])
    with pytest.raises(TrickLabError, match="does not exist"):  # the trace, not the data
        profile_step(recipe, repeats=2, trace=tmp_path / "missing" / "t.json")


def test_a_trace_named_dash_or_under_a_file_is_refused_in_words(tmp_path):
    recipe = tricklab.load_recipe(None, TINY_SYNTHETIC)
    with pytest.raises(TrickLabError, match="--trace needs a file name, got -"):
        profile_step(recipe, repeats=2, trace=Path("-"))
    (tmp_path / "file.json").write_text("{}")
    with pytest.raises(TrickLabError, match="its folder is a file, not a folder"):
        profile_step(recipe, repeats=2, trace=tmp_path / "file.json" / "t.json")


def test_a_recipe_that_fails_to_build_leaves_the_backend_flags_as_they_were():
    recipe = tricklab.load_recipe(
        None, [*TINY_SYNTHETIC, "model.whiten_bias_epochs=1", "model.name=resnet18",
               "model.widths=null", "tricks.matmul_precision=medium"]
    )  # fmt: skip
    before = torch.get_float32_matmul_precision()
    with pytest.raises(TrickLabError, match="whitening layer"):
        profile_step(recipe, repeats=2)
    assert torch.get_float32_matmul_precision() == before


def _trace_refusal(tmp_path, target, capsys) -> str:
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()}
    assert main(["profile", "step", *TINY_SYNTHETIC, "--repeats", "2", "--trace", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error:")
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()}
    assert after == before  # nothing replaced, nothing left
    return err


@pytest.mark.parametrize("kind", ["device", "link", "result.json", "database"])
def test_trace_never_replaces_a_device_a_link_or_another_kind_of_file(tmp_path, kind, capsys):
    # was: --trace /dev/null replaced the system's /dev/null with a regular file (os.replace)
    target = tmp_path / "t.json"
    if kind == "device":
        target = Path(os.devnull)
    elif kind == "link":
        (tmp_path / "real.json").write_text('{"traceEvents": []}')
        target.symlink_to(tmp_path / "real.json")
    elif kind == "result.json":
        target = tmp_path / "run" / "result.json"
        target.parent.mkdir()
        target.write_text('{"status": "complete", "val_acc": 0.5}')
    else:
        target.write_bytes(b"SQLite format 3\0" + bytes(100))
    err = _trace_refusal(tmp_path, target, capsys)
    assert "--trace" in err
    assert Path(os.devnull).is_char_device()


@pytest.mark.parametrize("name", ["t" * 300 + ".json", "tr\nerror: forged.json"])
def test_trace_names_too_long_or_with_a_newline_are_one_line(tmp_path, name, capsys):
    if "\n" in name:  # a legal name: written, and echoed on one line
        code = main(["profile", "step", *TINY_SYNTHETIC, "--repeats", "2", "--trace",
                     str(tmp_path / name)])  # fmt: skip
        out = capsys.readouterr()
        assert code == 0 and (tmp_path / name).is_file()
        assert "\nerror: forged" not in out.out + out.err
        assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary file left
    else:
        assert "longer than the file system takes" in _trace_refusal(
            tmp_path, tmp_path / name, capsys
        )


def test_a_trace_written_before_is_replaced(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text('{"schemaVersion": 1, "traceEvents": []}')
    recipe = tricklab.load_recipe(None, TINY_STEP)
    profile_step(recipe, repeats=2, trace=trace)
    assert json.loads(trace.read_text())["traceEvents"]


def test_a_part_of_forward_backward_never_takes_more_than_the_whole_step():
    # noise can make the bare copy seem slower than the full step: its share was 300 %
    samples = samples_ms(
        full=[10.0, 10.0, 10.0],
        no_loading=[10.0, 10.0, 10.0],
        forward_backward=[10.0, 10.0, 10.0],
        forward=[10.0, 10.0, 10.0],
        forward_backward_bare=[30.0, 30.0, 30.0],
    )
    components, inside = step_components(samples)
    assert sum(c["share"] for c in components) == pytest.approx(1)
    assert [c["share"] for c in inside] == [0.0, 1.0]


class _Event:
    def __init__(self, key: str, self_us: float) -> None:
        self.key, self.count, self.self_cpu_time_total = key, 2, self_us


class _Profile:
    def key_averages(self):
        return [_Event("aten::conv", 300.0), _Event("aten::add", 100.0), _Event("aten::x", -200.0)]


def test_operator_shares_are_fractions_of_the_self_time_above_0():
    # torch.profiler gives a self time below 0 now and then: shares were 150 % and -100 %
    rows = top_operators(_Profile(), torch.device("cpu"), count=3, steps=2)
    assert [round(o["self_share"], 6) for o in rows] == [0.75, 0.25, 0.0]
    assert rows[0]["self_cpu_ms_per_step"] == pytest.approx(0.15)


ALLOCATOR = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 25719496704 bytes. Error code 12 (Cannot allocate memory)"
)


def test_a_step_that_does_not_fit_in_memory_is_one_line_and_exit_2(monkeypatch, capsys):
    # was a traceback (data.image_size=1024: the whitening init asked for 25 GB), exit 1
    from tricklab.training import setup

    def out_of_memory(*args, **kwargs):
        raise RuntimeError(ALLOCATOR)

    monkeypatch.setattr(setup, "prepare", out_of_memory)
    before = torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision()
    assert main(["profile", "step", *TINY_SYNTHETIC, "--repeats", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: the recipe's step at batch 64"), err
    assert "on 16×16 images does not fit in memory (asked for 24.0 GiB)" in err
    assert "lower data.image_size, loader.batch_size" in err
    assert (torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision()) == before


def test_another_runtime_error_of_the_step_is_not_taken_for_memory(monkeypatch):
    from tricklab.training import setup

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(setup, "prepare", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        profile_step(tricklab.load_recipe(None, TINY_SYNTHETIC), repeats=2)


def test_a_trace_torch_wrote_only_in_part_leaves_the_earlier_one_whole(tmp_path):
    """Seventh hostile round: on a full disk torch's C++ export_chrome_trace wrote an empty file
    without a word, which replaced the earlier trace (exit 0); its own .tmp file stayed."""
    from tricklab.profile.trace import write_trace

    earlier = tmp_path / "t.json"
    earlier.write_text('{"traceEvents": []}')

    class CutShort:
        def export_chrome_trace(self, name):
            Path(f"{name}.tmp").write_text('{"traceEvents": [', encoding="utf-8")
            Path(name).write_text('{"traceEvents": [{"name": "a"', encoding="utf-8")

    with pytest.raises(TrickLabError, match=r"the trace came out cut short \(29 bytes"):
        write_trace(CutShort(), earlier)
    assert earlier.read_text() == '{"traceEvents": []}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]
