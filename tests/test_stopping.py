"""Stopping and failures: Ctrl-C/SIGTERM as one exception, and train() deciding how a run ended."""

import json
import os
import signal
import threading
import time

import pytest
from tiny_recipe import TINY_SYNTHETIC

from tricklab.core.stopping import Interrupted, StopRequest, stop_on_signals
from tricklab.recipe.schema import load_recipe
from tricklab.training import api, loop

TINY = load_recipe(None, [*TINY_SYNTHETIC, "run.epochs=2"])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_both_signals_raise_interrupted_and_mark_the_request(signum):
    with stop_on_signals() as stop:
        assert not stop.requested
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signum)
            signal.sigtimedwait([], 1)  # a pause in which the handler runs
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):  # raised again wherever it is checked
            stop.check()


def test_a_signal_in_a_deferred_block_stops_where_the_block_ends_and_a_run_within_at_once():
    """A storage write is never cut halfway (a lock left held hung a worker): inside deferred()
    the signal only marks the request; the block's end raises it. deferred(False) inside (a run)
    raises at once again, and leaving it back into the deferred block raises nothing."""
    with stop_on_signals() as stop:
        finished = []
        with pytest.raises(Interrupted):
            with stop.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                signal.sigtimedwait([], 0.2)  # the handler runs here, and returns
                finished.append("the write")
        assert finished == ["the write"] and stop.requested and not stop.deferring
    with stop_on_signals() as stop, pytest.raises(Interrupted):  # at the deferred block's end
        with stop.deferred():
            with pytest.raises(Interrupted), stop.deferred(False):
                os.kill(os.getpid(), signal.SIGINT)
                signal.sigtimedwait([], 1)
            assert stop.deferring  # back in the deferred block: no second raise here
            with pytest.raises(Interrupted):
                stop.check()  # the next safe point


def test_a_deferred_wait_ends_when_the_signal_comes():
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    with stop_on_signals() as stop, pytest.raises(Interrupted), stop.deferred():
        timer.start()
        stop.wait(30)  # ends at the signal, not after 30 s
        assert stop.requested
    timer.join()


def test_a_stop_inside_a_database_read_prints_no_cursor_clean_up_traceback(tmp_path, caplog):
    """The stop raised inside SQLAlchemy's fetch leaves a cursor it cannot close, and its pool
    logs "Error closing cursor" with a traceback (seen under `ablate`'s one "interrupted" line):
    quiet once a stop arrived, heard again after the block."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")

    def logged() -> bool:
        caplog.clear()
        engine.pool.logger.error("Error closing cursor", exc_info=True)
        return "Error closing cursor" in caplog.text

    with stop_on_signals():
        assert logged()  # before a stop: heard
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 1)
        assert not logged()
    assert logged()
    engine.dispose()


@pytest.mark.parametrize(
    "found", [signal.SIG_IGN, signal.SIG_DFL, signal.default_int_handler, lambda s, f: None]
)
def test_the_handlers_found_are_put_back(found):
    before = {s: signal.signal(s, found) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with stop_on_signals():
            assert signal.getsignal(signal.SIGINT) is not found
        assert signal.getsignal(signal.SIGINT) is found
        assert signal.getsignal(signal.SIGTERM) is found
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_outside_the_main_thread_signals_are_left_alone():
    seen = {}

    def worker():
        with stop_on_signals() as stop:
            seen["handler"] = signal.getsignal(signal.SIGTERM)
            seen["requested"] = stop.requested

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == {"handler": before, "requested": False}


def test_a_stop_requested_mid_run_ends_it_interrupted_with_the_epochs_it_finished(
    tmp_path, monkeypatch
):
    """As after a Ctrl-C whose KeyboardInterrupt Python dropped: the epoch's end stops the run."""
    stop, real_step = StopRequest(), loop.train_step

    def step(*args):
        stop.request()
        return real_step(*args)

    monkeypatch.setattr(loop, "train_step", step)
    with pytest.raises(api.RunInterrupted) as raised:
        api.train(TINY, out_dir=tmp_path, stop=stop)
    result = raised.value.result
    assert isinstance(raised.value, KeyboardInterrupt)  # callers that only stop, stop
    assert result.status == "interrupted" and "Ctrl-C" in result.error
    assert result.epochs_completed == 1 < TINY.run.epochs
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "interrupted"


def test_an_error_once_a_stop_was_requested_is_interrupted_not_failed(monkeypatch):
    """A library may turn the KeyboardInterrupt of a Ctrl-C into an error of its own."""
    stop = StopRequest()

    def step(*args):
        stop.request()
        raise RuntimeError("a callback raised KeyboardInterrupt")

    monkeypatch.setattr(loop, "train_step", step)
    with pytest.raises(api.RunInterrupted) as raised:
        api.train(TINY, stop=stop)
    assert raised.value.result.status == "interrupted"


def test_an_unexpected_error_is_returned_failed_with_its_traceback(monkeypatch, tmp_path):
    def step(*args):
        raise ValueError("a bug in a trick")

    monkeypatch.setattr(loop, "train_step", step)
    result = api.train(TINY, out_dir=tmp_path)
    assert result.status == "failed" and result.error == "ValueError: a bug in a trick"
    assert result.traceback.startswith("Traceback") and "in step" in result.traceback
    assert json.loads((tmp_path / "result.json").read_text()) == result.to_dict()


def test_an_error_raised_by_on_epoch_is_the_callers_and_propagates():
    class Pruned(Exception):
        pass

    def on_epoch(row):
        raise Pruned

    with pytest.raises(Pruned):
        api.train(TINY, on_epoch=on_epoch)


@pytest.mark.parametrize("exc", [SystemExit("boom"), GeneratorExit("boom")])
def test_a_sys_exit_or_generator_exit_from_on_epoch_reaches_the_caller_not_the_model(exc):
    """Twelfth hostile round: the caller's `sys.exit` in its callback was returned as a failed
    run, "the run's code called sys.exit('boom') (the model's?)"."""

    def on_epoch(row):
        raise exc

    with pytest.raises(type(exc)) as raised:
        api.train(TINY, on_epoch=on_epoch)
    assert raised.value is exc


@pytest.mark.parametrize(
    "exc, status",
    [
        (KeyboardInterrupt(), "interrupted"),
        (SystemExit(3), "interrupted"),
        (RuntimeError("CUDA error: out of memory"), "oom"),
        (ValueError("x"), "failed"),
    ],
)
def test_run_end_names_each_way_a_run_ends(exc, status):
    assert api.run_end(exc)[0] == status
    requested = StopRequest()
    requested.request()
    assert api.run_end(exc, requested)[0] == "interrupted"


def test_a_closed_terminals_sighup_stops_as_sigterm_does_unless_it_is_ignored():
    """Seventh hostile round: SIGHUP (the terminal closed) killed a run without a word, its
    claim file left in its folder."""
    import signal

    from tricklab.core.stopping import Interrupted, stop_on_signals

    before = signal.getsignal(signal.SIGHUP)
    try:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        with pytest.raises(Interrupted), stop_on_signals() as stop:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)
        assert stop.requested and signal.getsignal(signal.SIGHUP) == signal.SIG_DFL
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup's: the caller keeps it
        with stop_on_signals() as stop:
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        assert not stop.requested
    finally:
        signal.signal(signal.SIGHUP, before)
