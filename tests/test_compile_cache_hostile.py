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
