"""`python -m rocketspark.apps.dev_child ARGS`: `python -m rocketspark.dev ARGS` that stops when the
process that started it dies, however it dies (a demo killed with SIGKILL, say, by a timeout).

On Linux the kernel sends it SIGTERM when its parent exits (`PR_SET_PDEATHSIG`), and SIGTERM stops
the servers cleanly; elsewhere it is plain `rocketspark.dev`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
#: the pid of the process that started this one, set by it
PARENT_ENV = "ROCKETSPARK_PARENT_PID"


def die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    expected = os.environ.get(PARENT_ENV)
    if expected and os.getppid() != int(expected):  # the parent died before prctl took effect
        sys.exit(0)


def main() -> int:
    die_with_parent()
    from rocketspark.dev import main as dev_main  # noqa: PLC0415 - after the guard is in place

    return dev_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
