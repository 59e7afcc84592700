"""The eighth hostile round's environment and path cases: every one is one `error:` line and exit
code 2 before any file is written (torchrun's variables, OpenMP's, torch's default compile cache
folder, a path longer than the system takes), and a report's figures without matplotlib's
warnings about a config folder it cannot use."""

import os
import socket
import subprocess
import sys
import time

import pytest
from test_cli import TINY, tricklab


def one_error_line(err: bytes) -> str:
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    ("meeting", "message"),
    [
        ({"MASTER_ADDR": "localhost", "MASTER_PORT": "abc"}, "MASTER_PORT is no port number"),
        ({"MASTER_ADDR": "localhost", "MASTER_PORT": "99999"}, "MASTER_PORT is no port number"),
        ({"MASTER_ADDR": "localhost", "MASTER_PORT": "0"}, "MASTER_PORT is no port number"),
        ({"MASTER_ADDR": " 127.0.0.1", "MASTER_PORT": "29500"}, "MASTER_ADDR names no host"),
        (
            {"MASTER_ADDR": "no.such.host.invalid", "MASTER_PORT": "29500"},
            "MASTER_ADDR names no host this machine can find",
        ),
    ],
    ids=["port-no-number", "port-past-65535", "port-0", "spaced-address", "unknown-host"],
)
def test_a_meeting_place_the_ranks_cannot_use_is_one_line(tmp_path, meeting, message):
    """A MASTER_PORT of `abc` or 99999 was torch's ValueError traceback; a host nothing resolves
    about 80 lines of warnings and a network error."""
    env = {"RANK": "0", "WORLD_SIZE": "1", **meeting}
    code, _, err = tricklab(["train", *TINY, "--out", str(tmp_path / "r")], env=env)
    assert code == 2 and message in one_error_line(err)
    assert not (tmp_path / "r").exists()


def test_a_group_whose_other_ranks_never_start_is_one_line_after_its_timeout(tmp_path):
    """RANK=0 of WORLD_SIZE=2 started alone waited in silence, then raised torch's
    DistStoreError traceback; now run.dist_timeout_seconds bounds the wait and it is one line."""
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}  # fmt: skip
    args = ["train", *TINY, "run.dist_timeout_seconds=2", "--out", str(tmp_path / "r")]
    code, _, err = tricklab(args, env=env)
    line = one_error_line(err)
    assert code == 2 and "the process group of 2 processes did not form within 2 s" in line
    assert "start every rank" in line


def test_a_port_in_use_says_the_group_could_not_form_not_that_it_waited(tmp_path):
    """A MASTER_PORT another program listens on failed at once, and the line said the group
    "did not form within 600 s"."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(taken.getsockname()[1])}  # fmt: skip
        code, _, err = tricklab(["train", *TINY, "--out", str(tmp_path / "r")], env=env)
    line = one_error_line(err)
    assert code == 2 and "the process group of 2 processes could not form at 127.0.0.1" in line
    assert "within" not in line and "address already in use" in line
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("rank", ["1", "00", "01"])
def test_a_rank_no_launcher_started_says_its_own_error(tmp_path, rank):
    """RANK=1 WORLD_SIZE=2 set by hand (no torchrun, no --nproc) silenced every error: rank 0
    speaks for a launch, and nobody was there to."""
    env = {"RANK": rank, "WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}
    for args in (["train", *TINY, "nosuch.key=1"], ["tricks", "nogroup"]):
        code, _, err = tricklab(args, env=env)
        assert code == 2 and ("nosuch.key" in one_error_line(err) or "nogroup" in str(err))


def test_under_a_launcher_a_rank_past_0_stays_quiet_and_rank_0_speaks(monkeypatch):
    from tricklab.core.errors import RANK_ERRORS_ENV, TORCHRUN_ENV, this_process_speaks

    for launcher in (RANK_ERRORS_ENV, TORCHRUN_ENV):
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv(launcher, "x")
        for rank, speaks in (("0", True), ("1", False), ("2", True)):  # 2 of 2: no group
            monkeypatch.setenv("RANK", rank)
            assert this_process_speaks() is speaks, (launcher, rank)
        monkeypatch.delenv(launcher)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OMP_NUM_THREADS", "99999999999999999999"),
        ("OMP_NUM_THREADS", "4,70000"),
        ("OMP_WAIT_POLICY", "abc"),
        ("GOMP_SPINCOUNT", "abc"),
        ("OMP_PROC_BIND", "bogus"),
        ("OMP_PLACES", "bogus"),
        ("OMP_DYNAMIC", "maybe"),
        ("OMP_STACKSIZE", "abc"),  # ninth round: the variables libgomp reads beyond these
        ("OMP_SCHEDULE", "bogus"),
        ("OMP_THREAD_LIMIT", "0"),
        ("OMP_MAX_ACTIVE_LEVELS", "x"),
    ],
)
def test_an_openmp_variable_libgomp_cannot_read_is_one_line(name, value):
    """libgomp printed its own 'Invalid value for environment variable' lines and went on."""
    from tricklab.core.environment import THREADS_ENV, _libgomp

    if name != THREADS_ENV and _libgomp() is None:
        pytest.skip("this torch loads no libgomp: another OpenMP judges these")
    code, _, err = tricklab(["models", "resnet18"], env={name: value})
    assert code == 2 and f"{name}={value}" in one_error_line(err)


def test_an_openmp_value_that_spins_libgomp_is_one_line_not_a_hang(monkeypatch):
    """Ninth hostile round: GOMP_CPU_AFFINITY=bogus spun torch's import (libgomp reading it) at
    full CPU for ever, deaf to SIGTERM; libgomp is now asked in a child process, given a time."""
    from tricklab.core import environment
    from tricklab.core.errors import TrickLabError

    monkeypatch.setattr(environment, "OPENMP_SECONDS", 1.0)
    monkeypatch.setenv("GOMP_CPU_AFFINITY", "bogus")
    if environment._libgomp() is None:
        pytest.skip("this torch brings no libgomp of its own")
    started = time.monotonic()
    with pytest.raises(TrickLabError, match=r"cannot use GOMP_CPU_AFFINITY=bogus: it did not"):
        environment.check_environment()
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GOMP_CPU_AFFINITY", "0-1"),
        ("OMP_NUM_THREADS", "2,1"),
        ("OMP_WAIT_POLICY", " Passive "),
        ("GOMP_SPINCOUNT", "10k"),
        ("GOMP_SPINCOUNT", "infinite"),
        ("OMP_PROC_BIND", "spread,close"),
        ("OMP_PLACES", "cores(2)"),
        ("OMP_PLACES", "{0:2}"),
        ("OMP_DYNAMIC", "TRUE"),
    ],
)
def test_openmp_values_libgomp_reads_pass_without_a_word(name, value):
    from tricklab.core.environment import check_environment

    os.environ[name], saved = value, os.environ.get(name)
    try:
        check_environment()
    finally:
        if saved is None:
            del os.environ[name]
        else:
            os.environ[name] = saved
    code, out, err = tricklab(["models", "resnet18"], env={name: value})
    assert code == 0 and b"resnet18" in out and err == b"", err


def test_torchs_default_compile_cache_folder_as_a_file_is_one_line_before_the_run(tmp_path):
    """TMPDIR's torchinductor_USER (torch's default cache folder) as a file failed every run at
    the model's first forward with a 67-line FileExistsError and left a failed run's folder."""
    import getpass

    (tmp_path / f"torchinductor_{getpass.getuser()}").write_text("x")
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}  # the default
    run = subprocess.run([sys.executable, "-m", "tricklab", "train", *TINY, "--out",
                          str(tmp_path / "r")], env={**env, "TMPDIR": str(tmp_path),
                          "OMP_NUM_THREADS": "1"}, capture_output=True, timeout=300)  # fmt: skip
    code, line = run.returncode, one_error_line(run.stderr)
    assert code == 2 and "compile cache folder" in line and "is not a folder" in line
    assert not (tmp_path / "r").exists()


def test_a_path_longer_than_the_system_takes_is_one_line_everywhere(tmp_path, run_folder):
    """A whole path past PATH_MAX (4096 bytes: each part under 255) was a traceback from
    `report`, `results`, `speedrun --out`, `demo --out` and `profile step --trace`."""
    deep = str(tmp_path / "/".join(["c" * 200] * 25))
    for args in (
        ["report", deep],
        ["report", str(run_folder), "--out", deep],
        ["results", deep],
        ["speedrun", *TINY, "--out", deep],
        ["demo", "--out", deep],
        ["profile", "step", *TINY, "--repeats", "3", "--trace", deep + ".json"],
    ):
        code, _, err = tricklab(args)
        line = one_error_line(err)
        assert code == 2 and "File name too long" in line, (args[0], line)
    assert list(tmp_path.iterdir()) == []  # no part of it made


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "r"
    code, _, err = tricklab(["train", *TINY, "--out", str(out)])
    assert code == 0, err
    return out


@pytest.mark.parametrize("where", ["MPLCONFIGDIR", "XDG_CONFIG_HOME"])
def test_a_report_says_nothing_of_a_matplotlib_config_folder_it_cannot_use(
    tmp_path, run_folder, where
):
    """MPLCONFIGDIR (or HOME with XDG_CONFIG_HOME) naming a file: the report was written, with two
    matplotlib warnings on stderr; matplotlib uses a temporary folder, which serves as well."""
    (tmp_path / "afile").write_text("x")
    env = {where: str(tmp_path / "afile")}
    if where == "XDG_CONFIG_HOME":
        env |= {"HOME": str(tmp_path / "afile"), "XDG_CACHE_HOME": str(tmp_path / "afile")}
    out = tmp_path / "rep"
    run = subprocess.run([sys.executable, "-m", "tricklab", "report", str(run_folder), "--out",
                          str(out)], env={**os.environ, **env}, capture_output=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stderr.decode().strip().splitlines() == [f"report: {out}/report.html (and "
                                                        "report.md, 6 figure files)"]  # fmt: skip


def test_a_link_loop_as_an_experiment_folder_is_one_line(tmp_path):
    """Ninth hostile round: `ablate --out LOOP` (a link to a link back to it), `results --out`
    and `report LOOP` were Python 3.11's RuntimeError 'Symlink loop' traceback from resolve()."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    loop = str(tmp_path / "a")
    for args in (
        ["ablate", "--baseline", "speedrun94", *TINY, "--vary", "tricks.label_smoothing=0,0.1",
         "--out", loop, "--study", "s"],
        ["results", "--out", loop, "s"],
        ["report", loop],
    ):  # fmt: skip
        code, _, err = tricklab(args)
        line = one_error_line(err)
        assert code == 2 and "Too many levels of symbolic links" in line, (args[0], line)


def test_a_working_folder_deeper_than_torch_takes_is_one_line(tmp_path):
    """Ninth hostile round: from a folder 4,400 bytes deep torch's MKL ended the process with
    'Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so' (its exit code 2, no `error:`)."""
    climb = (  # a path past PATH_MAX is reached one relative step at a time
        "import os, subprocess, sys\n"
        f"os.chdir({str(tmp_path)!r})\n"
        "while len(os.fsencode(os.getcwd())) < 4200:\n"
        "    os.mkdir('d' * 200); os.chdir('d' * 200)\n"
        "sys.exit(subprocess.run([sys.executable, '-m', 'tricklab', 'models', 'resnet18']).returncode)\n"
    )
    run = subprocess.run([sys.executable, "-c", climb], capture_output=True, timeout=120)
    line = one_error_line(run.stderr)
    assert run.returncode == 2 and "the current folder's path is" in line and "cd into" in line


def test_a_report_takes_no_matplotlib_backend_it_does_not_need(tmp_path, run_folder):
    """Ninth hostile round: MPLBACKEND=bogus was matplotlib's ValueError traceback; a report
    draws into files and needs no backend of pyplot's."""
    for i, backend in enumerate(("bogus", "TkAgg")):
        code, _, err = tricklab(["report", str(run_folder), "--out", str(tmp_path / f"r{i}")],
                                env={"MPLBACKEND": backend, "DISPLAY": ""})  # fmt: skip
        assert code == 0 and err.decode().startswith("report: "), err


def test_a_file_size_limit_is_one_line_like_a_full_disk_and_leaves_no_run(tmp_path):
    """Eleventh hostile round: under `ulimit -f 2` the run's result.json write was EFBIG, a
    48-line traceback and exit 1."""
    import resource

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    out = tmp_path / "run"
    code, _, err = tricklab(["train", *TINY, "--out", str(out), "-q"], preexec_fn=limited)
    line = one_error_line(err)
    assert code == 2 and "File too large" in line and "ulimit -f" in line, line
    assert not out.exists()


def test_torch_that_cannot_be_mapped_under_a_memory_limit_is_one_line(tmp_path):
    """Eleventh hostile round: under `ulimit -v 2500000` importing torch failed ("failed to map
    segment from shared object"): an 18-line traceback and exit 1."""
    import resource

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (2_500_000 * 1024, 2_500_000 * 1024))

    code, _, err = tricklab(["data", "show", "synthetic"], preexec_fn=limited)
    if code == 0:
        pytest.skip("torch loads within 2.4 GiB of address space here")
    line = one_error_line(err)
    assert code == 2 and "ulimit -v" in line, line
    assert line.startswith(("error: cannot load ", "error: torch cannot load under")), line


@pytest.mark.parametrize("kib", [20, 118])
def test_an_ablation_past_the_file_size_limit_is_one_line_naming_it(tmp_path, kib):
    """Verifying the eleventh round: SQLite says EFBIG as "disk I/O error" (at 20 KiB, and a
    half-made study.db left), and a write of a trial's runs past it was Optuna's traceback."""
    import resource

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (kib * 1024, kib * 1024))

    out = tmp_path / "study"
    args = ["ablate", "--baseline", "speedrun94", *TINY, "--vary", "tricks.label_smoothing=0",
            "--seeds", "1", "--budget-epochs", "1", "--out", str(out), "-q"]  # fmt: skip
    code, _, err = tricklab(args, preexec_fn=limited)
    if code == 0:
        pytest.skip(f"the study fits in {kib} KiB here")
    line = one_error_line(err)
    assert code == 2 and "File too large" in line and "ulimit -f" in line, line
    if kib == 20:  # the schema could not be written: no half-made database is left
        assert not (out / "study.db").exists()
    code, _, err = tricklab(args)  # the limit gone, the same command finishes the study
    assert code == 0, err
