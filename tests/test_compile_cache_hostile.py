"""The twelfth hostile round's compile-cache and torch-environment cases: a compile cache folder
that cannot be made or that others may write, a full disk or a damaged file met while compiling,
and torch's own variables that it cannot parse, are each one `error:` line and exit code 2 with
no run recorded (they were tracebacks and failed runs, or an ablation that exited 0)."""

import contextlib
import errno
import os
import pickle

import pytest
from test_cli import TINY, tricklab
from test_environment_hostile import one_error_line

from tricklab.core.paths import DiskFullError
from tricklab.training import api
from tricklab.training.compile_cache import (
    CompileCacheError,
    cache_problem,
    compile_cache_dir,
    make_private_folder,
)

COMPILING = [*TINY, "tricks.compile=default"]


@pytest.mark.parametrize("kind", ["file", "dev-null", "compile-a-file"])
def test_a_compile_cache_folder_that_cannot_be_made_is_one_line_before_the_run(tmp_path, kind):
    cache = {"file": tmp_path / "f", "dev-null": "/dev/null", "compile-a-file": tmp_path / "c"}[
        kind
    ]
    if kind == "file":
        cache.write_text("hi")
    if kind == "compile-a-file":
        cache.mkdir()
        (cache / "compile").write_text("hi")
    env = {"TRICKLAB_CACHE": str(cache)}
    code, _, err = tricklab(["train", *COMPILING, "--out", str(tmp_path / "r")], env=env)
    line = one_error_line(err)
    assert code == 2 and "compile cache" in line and "TRICKLAB_CACHE" in line, line
    assert not (tmp_path / "r").exists()  # no failed run's folder


def test_an_ablation_with_a_compile_cache_it_cannot_make_exits_2_not_0(tmp_path):
    (tmp_path / "f").write_text("hi")
    args = ["ablate", "--baseline", *COMPILING, "--vary", "tricks.label_smoothing=0"]
    args += ["--seeds", "1", "--out", str(tmp_path / "ab")]
    code, _, err = tricklab(args, env={"TRICKLAB_CACHE": str(tmp_path / "f")})
    assert code == 2 and "compile cache" in err.decode().strip().splitlines()[-1]


def test_a_compile_cache_others_may_write_is_refused_and_a_new_one_is_private(tmp_path):
    """torch loads pickles from the folder: one others may write is a way into the process."""
    folder = tmp_path / "compile" / "key"
    make_private_folder(folder)
    assert folder.stat().st_mode & 0o777 == 0o700 & ~_umask()
    os.chmod(tmp_path / "compile", 0o777)
    with pytest.raises(CompileCacheError, match="is not private .others may write it.*chmod go-w"):
        make_private_folder(folder)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_full_disk_or_a_damaged_file_met_while_compiling_is_named(tmp_path):
    folder = tmp_path / "compile" / "key"
    linker = RuntimeError(
        f"C++ compile error\n{folder}/x.so\nld: final link failed: No space left on device"
    )
    with_cause = RuntimeError("BackendCompilerFailed")
    with_cause.__cause__ = linker
    full = cache_problem(with_cause, folder)
    assert isinstance(full, DiskFullError) and full.errno == errno.ENOSPC
    assert str(folder) in str(full) and "free some space" in str(full)
    damaged = ImportError(f"{folder}/np/cnpb/main.so: file too short")
    failed = RuntimeError("backend compiler failed")
    failed.__context__ = damaged
    problem = cache_problem(failed, folder)
    assert isinstance(problem, CompileCacheError) and f"rm -r {folder}" in str(problem)
    truncated = pickle.UnpicklingError("pickle data was truncated")  # names no file of the cache
    assert cache_problem(truncated, folder) is None
    assert cache_problem(ValueError(f"a bug, near {folder}"), folder) is None  # not a load


def test_a_compile_cache_error_mid_run_records_no_run(tmp_path, monkeypatch):
    """Met at the warm-up (after the run started): nothing recorded, the folder taken back, as
    for a full disk, so the same command runs once the cache is removed."""

    def warm_up(parts, recipe):
        raise CompileCacheError("torch.compile could not load a file of its cache")

    monkeypatch.setattr(api, "needs_warm_up", lambda tricks, device: True)
    monkeypatch.setattr(api, "warm_up_run", warm_up)
    monkeypatch.setattr(api, "compile_cache", lambda device: contextlib.nullcontext())
    from tricklab.recipe.schema import load_recipe

    with pytest.raises(CompileCacheError):
        api.train(load_recipe(None, COMPILING), out_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_the_cache_key_folder_is_under_tricklabs_cache(tmp_path):
    import torch

    assert compile_cache_dir(torch.device("cpu"), tmp_path).parent == tmp_path / "compile"


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("TORCH_LOGS", "bogus", "Invalid log settings: bogus"),
        ("TORCHINDUCTOR_COMPILE_THREADS", "abc", "invalid literal for int()"),
    ],
)
def test_a_torch_variable_torch_cannot_parse_is_one_line(name, value, said):
    """TORCH_LOGS=bogus was a 30-line traceback from torch's import on every command; an
    Inductor variable read with int() failed runs that did not even compile."""
    code, _, err = tricklab(["models", "resnet18"], env={name: value})
    line = one_error_line(err)
    assert code == 2 and f"{name}={value}" in line and said in line, line


# ---------------------------------------------------------------- verifying the twelfth round


def test_a_damaged_compiled_module_or_a_full_cache_disk_is_a_machine_error(tmp_path):
    from tricklab.core.errors import MachineError

    folder = tmp_path / "compile" / "key"
    syntax = SyntaxError("invalid syntax")
    syntax.filename = str(folder / "6z" / "c6zz.py")
    failed = RuntimeError(f"Failed to import {folder}/6z/c6zz.py")
    failed.__cause__ = syntax
    outer = RuntimeError("InductorError")
    outer.__cause__ = failed
    assert isinstance(cache_problem(outer, folder), CompileCacheError)
    assert isinstance(cache_problem(syntax, folder), CompileCacheError)
    full = cache_problem(OSError(errno.ENOSPC, "No space left on device"), folder)
    assert isinstance(full, DiskFullError) and isinstance(full, MachineError)


def test_a_study_whose_cache_cannot_be_used_makes_no_study(tmp_path):
    """The first run's check came after the study and its first trial were stored (FAIL)."""
    cache = tmp_path / "c"
    (cache / "compile").mkdir(parents=True)
    os.chmod(cache / "compile", 0o777)
    args = ["ablate", "--baseline", *COMPILING, "--vary", "tricks.label_smoothing=0"]
    code, _, err = tricklab([*args, "--seeds", "1", "--out", str(tmp_path / "ab")],
                            env={"TRICKLAB_CACHE": str(cache)})  # fmt: skip
    assert code == 2 and "not private" in one_error_line(err)
    assert not (tmp_path / "ab").exists()


def test_a_machine_error_mid_study_leaves_its_trial_interrupted_to_run_again(tmp_path):
    import optuna

    from tricklab.experiments import AblationPlan, ablate
    from tricklab.experiments.storage import open_storage, storage_url
    from tricklab.recipe.schema import load_recipe

    def train(recipe, **kwargs):
        raise CompileCacheError("torch.compile could not load a file of its cache")

    plan = AblationPlan(
        load_recipe(None, TINY), {"optim.lr": [0.1]}, 1, study="m", out_dir=tmp_path
    )
    with pytest.raises(CompileCacheError):
        ablate(plan, train_fn=train)
    storage = open_storage(storage_url(None, tmp_path), must_exist=True)
    (trial,) = optuna.load_study(study_name="m", storage=storage).trials
    assert trial.user_attrs["status"] == "interrupted"


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"TORCHINDUCTOR_AUTOTUNE_POOL_INACTIVITY_TIMEOUT": "abc"}, "invalid literal for int()"),
        ({"TORCH_LOGS": "recompiles", "TORCH_LOGS_FORMAT": "%(bogus)s"}, "is no logging format"),
    ],
)
def test_more_torch_variables_are_one_line(env, said):
    code, _, err = tricklab(["models", "resnet18"], env=env)
    assert code == 2 and said in one_error_line(err)


def test_listings_that_load_no_torch_do_not_check_torchs_variables():
    code, out, err = tricklab(["recipes"], env={"TORCH_LOGS": "bogus"})
    assert code == 0 and b"speedrun94" in out and err == b""
