"""Make sure no broker JVM outlives the Python process that started it.

Three layers, from the normal case to the worst one:

1. ``LocalKafka.stop()`` (context manager exit, pytest session teardown) stops its nodes.
2. An ``atexit`` hook here stops whatever is still registered when the interpreter exits
   after an uncaught exception or a ``sys.exit`` from a test run.
3. Nodes started from the main thread are launched through ``setpriv --pdeathsig KILL`` when
   available, so the kernel kills the JVM even if Python itself is SIGKILLed (``atexit``
   cannot run then). Only from the main thread: the signal fires when the *thread* that
   forked the child ends, and a worker thread may end long before the broker should.

Only ``subprocess.Popen`` objects that this package created are ever signalled, and only
through ``Popen`` methods, which do nothing once the process has been reaped, so a recycled
PID can never be hit.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable

_lock = threading.Lock()
_processes: dict[int, subprocess.Popen[bytes]] = {}
_cleanups: dict[int, Callable[[], None]] = {}
_registered = False


def track(process: subprocess.Popen[bytes]) -> None:
    """Stop ``process`` at interpreter exit if nobody else did."""
    with _lock:
        _ensure_hook()
        _processes[id(process)] = process


def untrack(process: subprocess.Popen[bytes]) -> None:
    """Forget a process that has been stopped and reaped."""
    with _lock:
        _processes.pop(id(process), None)


def add_cleanup(key: object, callback: Callable[[], None]) -> None:
    """Run ``callback`` at interpreter exit (after processes are stopped) unless removed."""
    with _lock:
        _ensure_hook()
        _cleanups[id(key)] = callback


def remove_cleanup(key: object) -> None:
    """Cancel a callback registered with :func:`add_cleanup`."""
    with _lock:
        _cleanups.pop(id(key), None)


def terminate_all(grace: float = 15.0) -> None:
    """SIGTERM every tracked process, SIGKILL those still alive after ``grace`` seconds."""
    with _lock:
        processes = list(_processes.values())
        _processes.clear()
    stop_processes(processes, grace)


def stop_processes(processes: list[subprocess.Popen[bytes]], grace: float) -> None:
    """Stop several processes in parallel: SIGTERM all, wait, then SIGKILL the stragglers.

    In parallel because a KRaft cluster whose controllers leave one by one loses its quorum
    and the last nodes' controlled shutdown then waits for a controller that is gone.
    """
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _run_at_exit() -> None:
    terminate_all()
    with _lock:
        callbacks = list(_cleanups.values())
        _cleanups.clear()
    for callback in callbacks:
        # Best effort: at exit there is nobody left to report a failed cleanup to.
        with contextlib.suppress(Exception):
            callback()


def _ensure_hook() -> None:
    global _registered
    if not _registered:
        atexit.register(_run_at_exit)
        _registered = True


@functools.cache
def _setpriv_supports_pdeathsig() -> str | None:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    try:
        done = subprocess.run(
            [setpriv, "--help"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return setpriv if "--pdeathsig" in done.stdout else None


def parent_death_prefix() -> list[str]:
    """A command prefix that kills the child when this thread dies, or ``[]`` if unavailable.

    ``setpriv`` execs the real command, so the PID stays the JVM's own.
    """
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = _setpriv_supports_pdeathsig()
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
