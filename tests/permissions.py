"""Permission tests as root: a file of mode 000 denies nothing to root, so such a test runs its
command without the two capabilities that let root read and write past a file's mode."""

from __future__ import annotations

import os
import shutil

import pytest


def as_a_user_without_root_rights() -> list[str]:
    """The command prefix under which chmod 000 denies this process (root ignores it)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: a file's mode denies nothing")
    drop = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}"]
