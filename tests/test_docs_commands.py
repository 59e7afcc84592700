"""Every command of README.md and docs/ runs: at test size or as its `--dry-run` where the page
says so (tests/docs_commands.py has the convention), so the docs cannot rot. A page's commands run
in order in one scratch folder; tricklab's own run in this process, torch imported once."""

from __future__ import annotations

import shlex
import signal

import pytest
from docs_commands import (
    ROOT,
    SHARED,
    Outcome,
    commands,
    pages,
    redirect,
    run_in_shell,
    runs_in_shell,
    scratch_folder,
    split_env,
    with_appended,
)

from tricklab.cli.main import main


def run_here(argv, env, capsys, monkeypatch) -> Outcome:
    """`tricklab ARGV` in this process, as its own process would run it."""
    # torch's DataLoader leaves a SIGCHLD handler that raises once its workers end; in a shell
    # each command's process ends with its workers, so no later command of the page sees it.
    sigchld = signal.getsignal(signal.SIGCHLD)
    with monkeypatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse's own errors and --version
            code = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            signal.signal(signal.SIGCHLD, sigchld)
    out = capsys.readouterr()
    return Outcome(code, out.out, out.err)


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_of_the_page_runs(page, tmp_path, capsys, monkeypatch, tricklab_cache_dir):
    monkeypatch.setenv("TRICKLAB_CACHE", str(tricklab_cache_dir))
    monkeypatch.chdir(scratch_folder(tmp_path))
    problems = []
    for command in commands(page):
        if command.skip or ("../shared/data" in command.text and not SHARED.exists()):
            continue
        env, words = split_env(shlex.split(command.text))
        if runs_in_shell(words, command.text):
            outcome = run_in_shell(command, tmp_path / "work")
        else:
            words, target = redirect(words)
            argv = with_appended(words[1:], command.append)
            outcome = run_here(argv, env, capsys, monkeypatch)
            if target is not None:
                (tmp_path / "work" / target).write_text(outcome.stdout, encoding="utf-8")
        expected = 2 if command.expected_error else 0
        if outcome.code != expected:
            problems.append(
                f"{command.where()}: exit {outcome.code}, not {expected}: {command.text}\n"
                + (outcome.stderr[-1500:] or outcome.stdout[-1500:])
            )
        elif command.expected_error and command.expected_error not in " ".join(
            outcome.stderr.split()
        ):
            problems.append(f"{command.where()}: printed {outcome.stderr!r}")
    assert not problems, "\n".join(problems)
