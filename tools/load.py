"""Run a command with a CPU hog on every core: ``python tools/load.py [options] -- CMD ...``.

Used by ``make test-under-load`` to run the integration tests on a machine as busy as a
shared CI runner. It starts N busy-loop processes (default: one per core, ``os.cpu_count()``),
runs CMD, and when CMD ends -- normally, with a failure, on Ctrl-C or SIGTERM -- it kills
exactly the hogs it started, by their ``Popen`` handles (so a recycled PID is never hit), and
reaps them. It exits with CMD's exit code (130 after Ctrl-C, 143 after SIGTERM).

Every hog is bounded on its own too, in case this script is killed with SIGKILL: it exits
when its deadline (``--seconds``, at most 40 minutes) passes or when its parent dies.

CMD runs in its own session: a Ctrl-C in the terminal reaches this script only, which kills
the hogs at once, then passes one SIGINT on to CMD (pytest then tears its brokers down) and
waits for it (at most 3 minutes, then SIGKILL).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from types import FrameType

HARD_CAP_S = 40 * 60

# A pure-Python busy loop: checks its deadline and its parent every few million iterations.
_HOG = """
import os, sys, time
deadline = time.monotonic() + float(sys.argv[1])
parent = int(sys.argv[2])
n = 0
try:
    while True:
        n += 1
        if n % 2_000_000 == 0 and (time.monotonic() > deadline or os.getppid() != parent):
            break
except KeyboardInterrupt:
    pass
"""


class _Stop(Exception):
    """SIGTERM (or SIGHUP) arrived: clean up like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signum)


def start_hogs(count: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    """Start ``count`` busy loops, each in its own session, each bounded to ``seconds``."""
    hogs = []
    for _ in range(count):
        hogs.append(
            subprocess.Popen(
                [sys.executable, "-c", _HOG, str(seconds), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a terminal Ctrl-C does not reach them: we end them
            )
        )
    return hogs


def stop_hogs(hogs: list[subprocess.Popen[bytes]]) -> list[int]:
    """SIGKILL and reap exactly these processes; returns the PIDs that were still running."""
    killed = []
    for hog in hogs:
        if hog.poll() is None:
            hog.kill()  # Popen.kill: a no-op once reaped, never a recycled PID
            killed.append(hog.pid)
    for hog in hogs:
        hog.wait()
    return killed


def main(argv: list[str] | None = None) -> int:
    """Start the hogs, run the command, end the hogs; returns the command's exit code."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        usage="%(prog)s [--hogs N] [--seconds S] [--pid-file F] -- CMD ...",
    )
    parser.add_argument(
        "--hogs", type=int, default=os.cpu_count() or 1, help="busy loops (default: nproc)"
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=HARD_CAP_S,
        help=f"each hog's own deadline in seconds (default and maximum {HARD_CAP_S})",
    )
    parser.add_argument("--pid-file", help="write the hogs' PIDs here, one per line")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command to run (put it after --)")
    if args.hogs < 0:
        parser.error("--hogs must be >= 0")
    seconds = min(max(args.seconds, 1.0), HARD_CAP_S)

    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGHUP, _raise_stop)
    hogs: list[subprocess.Popen[bytes]] = []
    child: subprocess.Popen[bytes] | None = None
    code = 1
    try:
        hogs = start_hogs(args.hogs, seconds)
        pids = [h.pid for h in hogs]
        print(
            f"load: {len(hogs)} CPU hog(s), PIDs {pids}, each ending within {seconds:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        if args.pid_file:
            with open(args.pid_file, "w") as f:
                f.writelines(f"{pid}\n" for pid in pids)
        started = time.monotonic()
        child = subprocess.Popen(cmd, start_new_session=True)
        code = child.wait()
        took = time.monotonic() - started
        print(f"load: command exited {code} after {took:.0f} s", file=sys.stderr)
    except (KeyboardInterrupt, _Stop) as exc:
        signum = exc.signum if isinstance(exc, _Stop) else signal.SIGINT
        code = 128 + signum
        killed = stop_hogs(hogs)  # first: the command's teardown needs no extra load
        print(f"load: interrupted; killed and reaped hog PIDs {killed}", file=sys.stderr)
        if child is not None and child.poll() is None:
            print("load: passing SIGINT on to the command, waiting for it", file=sys.stderr)
            child.send_signal(signal.SIGINT)  # pytest tears its fixtures (brokers) down
            try:
                child.wait(timeout=180)
            except (subprocess.TimeoutExpired, KeyboardInterrupt, _Stop):
                child.kill()
                child.wait()
    finally:
        killed = stop_hogs(hogs)  # a no-op for hogs already reaped
        if killed:
            print(f"load: killed and reaped hog PIDs {killed}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
