"""How workers tell each other they are alive: the heartbeat and grace period settings.

No Optuna here: the CLI reads the defaults to build its parser (claims.py does the beating).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tricklab.core.errors import TrickLabError

DEFAULT_HEARTBEAT_SECONDS = 10.0
DEFAULT_GRACE_SECONDS = 120.0
MAX_HEARTBEAT_SECONDS = 86_400


@dataclass(frozen=True)
class Liveness:
    """How workers tell each other they are alive (see claims.py).

    heartbeat_seconds: beat interval; grace_seconds: silence after which another host's worker
    counts as dead (same-host workers are checked by pid at once); poll_seconds: how often an idle
    worker looks again while units of its plan run elsewhere."""

    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    poll_seconds: float = 2.0

    def __post_init__(self) -> None:
        for flag, value in (
            ("--heartbeat-seconds", self.heartbeat_seconds),
            ("--grace-seconds", self.grace_seconds),
            ("poll_seconds", self.poll_seconds),
        ):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise TrickLabError(f"{flag} {value} must be a finite number of seconds > 0")
        if self.heartbeat_seconds > MAX_HEARTBEAT_SECONDS:  # beyond threading's timeouts
            raise TrickLabError(
                f"--heartbeat-seconds {self.heartbeat_seconds} must be at most "
                f"{MAX_HEARTBEAT_SECONDS} (a day)"
            )
        # A live worker beats at least once per grace period, or others take its trial for dead.
        if self.grace_seconds <= self.heartbeat_seconds:
            raise TrickLabError(
                f"--grace-seconds {self.grace_seconds} must be larger than the heartbeat "
                f"interval ({self.heartbeat_seconds} s)"
            )
