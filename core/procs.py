"""Small helpers for the processes Sweepstack starts: children that die with their parent,
and a free local port for a server or a rendezvous."""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
#: The scheduling group of this process's session, where the kernel has autogroups.
AUTOGROUP = "/proc/self/autogroup"


def die_with_parent(sig: int, nice: int = 0) -> Callable[[], None]:
    """A `preexec_fn` that has Linux send `sig` to the child when its parent dies, and
    lowers the child's CPU priority by `nice` (0: as the parent's).

    Without it a `kill -9` of the parent leaves the children running (and holding ports).
    Elsewhere than Linux the signal part does nothing.

    A child in a session of its own (``start_new_session``) is, with the kernel's
    autogroups on (most desktop and server kernels), in a scheduling group of its own, and
    groups share the CPU equally whatever their processes' nice values: so the group's
    nice is lowered too (``/proc/self/autogroup``, sched(7)). Without it a dashboard
    started at nice 10 took as much CPU as the workers' start on 2 cores.
    """

    def set_signal() -> None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
        if nice:
            with contextlib.suppress(OSError):
                os.nice(nice)
            with contextlib.suppress(OSError), open(AUTOGROUP, "w") as group:
                group.write(str(nice))

    return set_signal


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
