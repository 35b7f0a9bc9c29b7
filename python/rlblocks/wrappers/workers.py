"""Worker processes that leave Ctrl-C to the process that started them.

A Ctrl-C in a terminal sends SIGINT to the whole foreground process group: the trainer and
every env worker it forked. A worker that dies of it (gymnasium's async workers report the
KeyboardInterrupt as an env error) breaks the trainer's clean stop, which still has to step,
save and close its envs. Workers started inside :func:`workers_ignore_sigint` ignore SIGINT
(a disposition that forked and spawned children inherit); the trainer still gets it and
ends them when it closes its envs.

Examples:
    >>> import signal
    >>> before = signal.getsignal(signal.SIGINT)
    >>> with workers_ignore_sigint():
    ...     signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    True
    >>> signal.getsignal(signal.SIGINT) is before
    True
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["workers_ignore_sigint"]


@contextlib.contextmanager
def workers_ignore_sigint() -> Iterator[None]:
    """SIGINT is ignored while inside (so the worker processes started here ignore it), and
    the caller's handler is restored on the way out; off the main thread (where Python cannot
    change handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
