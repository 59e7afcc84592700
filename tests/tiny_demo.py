"""The demo's plan (same baseline, same tricks) on a budget of seconds, for tests.

Imported, `tiny_plan(cache_dir)` gives it. Run as a file before a command (tests/faults.py's
FAULTS_PRELUDE), it makes `tricklab demo` use it, with the decode cache of $TRICKLAB_CACHE."""

from __future__ import annotations

import dataclasses

from tricklab import demo


def tiny_plan(cache_dir=None) -> demo.DemoPlan:
    return dataclasses.replace(
        demo.DemoPlan(),
        epochs=1.0,
        train_size=600,
        test_size=200,
        cpu_widths=(8, 16, 16),
        cache_dir=None if cache_dir is None else str(cache_dir),
    )


if __name__ == "__main__":  # as FAULTS_PRELUDE: where `tricklab demo` looks its plan up
    import tricklab.cli.demo as demo_cli

    demo_cli.DemoPlan = tiny_plan
