"""The run's processes start with SIGINT ignored, but the run itself ignores Ctrl-C only
while it launches one (fork, exec, the start-up data): a Ctrl-C that arrives while it waits
for a child to come up — a manager's handshake, seconds on a busy machine — stops it.
(Under a whole process group's SIGINT this was lost when the wait was covered too: the run
went on to exit 0.)"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import pytest

from ragprivacy.eval.runner import _QuietSpawnContext


def _disposition(out: multiprocessing.Queue[bool]) -> None:
    out.put(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)


def test_children_start_with_sigint_ignored_and_the_parent_keeps_its_handler() -> None:
    ctx = _QuietSpawnContext()
    out: multiprocessing.Queue[bool] = ctx.Queue()
    child = ctx.Process(target=_disposition, args=(out,))
    child.start()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert out.get(timeout=120) is True
    child.join(timeout=60)


def test_a_ctrl_c_while_a_manager_comes_up_is_not_lost() -> None:
    ctx = _QuietSpawnContext()
    before = set(multiprocessing.active_children())

    def interrupt_once_launched() -> None:
        # a child in active_children() has been launched: the launch window is over
        deadline = time.monotonic() + 120
        while set(multiprocessing.active_children()) <= before:
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=interrupt_once_launched)
    sender.start()
    manager = None
    with pytest.raises(KeyboardInterrupt):
        try:
            manager = ctx.Manager()  # the handshake, or just after it
            time.sleep(30)  # the signal has come by now, whatever the load
        finally:
            sender.join()
    if manager is not None:
        manager.shutdown()
    for child in set(multiprocessing.active_children()) - before:
        child.terminate()
        child.join(timeout=10)
