"""Test the compiled wheels ``make wheels`` left in ``dist/``: ``make test-compiled``.

For each CPython >= 3.11 (tools/pythons.py), the wheel for it is installed from its file in
``dist/`` into a virtualenv of that Python, with what the unit suite needs (pyproject.toml's
``wheel-tests`` group, as the release workflow does), and the whole unit suite runs against
it: ``AIOKPROD_EXPECT_COMPILED=1`` (every listed module must run compiled) and
``AIOKPROD_EXPECT_WHEEL`` (tests/conftest.py fails the run unless aiokprod is imported from
that wheel's files, not from the source tree). The venv of the Python that runs this script
is ``.venv-mypyc`` (the benchmarks' compiled rows run it) and also gets the test and spark
extras; the round-trip integration tests run there too. Other Pythons: ``.venv-mypyc-py3.X``.

A venv is made again when pyproject.toml is newer than it; the wheel is reinstalled every
time. Prints one line per Python (and for the integration run) and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
sys.path.insert(0, str(TOOLS))

from pythons import find_pythons, minor_version  # noqa: E402

INTEGRATION = ["tests/integration/test_producer_roundtrip.py"]


def venv_for(python: Path) -> Path:
    """``.venv-mypyc`` for this script's own Python, ``.venv-mypyc-py3.X`` for the others."""
    minor = minor_version(python)
    if minor == sys.version_info[:2]:
        return ROOT / ".venv-mypyc"
    return ROOT / ".venv-mypyc-py{}.{}".format(*minor)


def wheel_for(dist: Path, python: Path) -> Path:
    """The one compiled wheel in ``dist`` for ``python``."""
    tag = "cp{}{}".format(*minor_version(python))
    found = sorted(dist.glob(f"aiokprod-*-{tag}-{tag}-*.whl"))
    if len(found) != 1:
        sys.exit(f"expected one {tag} wheel in {dist} (make wheels), found {found}")
    return found[0]


def install(python: Path, venv: Path, wheel: Path, extras: str) -> None:
    """The wheel into ``venv``; the venv (and the dependencies) made first if stale."""
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    stamp = venv / ".installed"
    pyproject = ROOT / "pyproject.toml"
    if not stamp.exists() or pyproject.stat().st_mtime > stamp.stat().st_mtime:
        subprocess.run(["rm", "-rf", str(venv)], check=True)
        subprocess.run([str(python), "-m", "venv", str(venv)], check=True)
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        group = f"--group={pyproject}:wheel-tests"
        subprocess.run([*pip, group, f"{wheel}{extras}"], check=True, cwd=ROOT)
        stamp.touch()
    subprocess.run([*pip, "--force-reinstall", "--no-deps", str(wheel)], check=True)


def pytest(venv: Path, wheel: Path, paths: list[str], log: Path) -> tuple[bool, str]:
    """Run pytest of ``venv`` on ``paths`` against the installed ``wheel``; (passed, summary).

    The venv's ``pytest`` script, not ``python -m pytest``: that would put the source tree
    first on ``sys.path``.
    """
    env = {**os.environ, "AIOKPROD_EXPECT_COMPILED": "1", "AIOKPROD_EXPECT_WHEEL": str(wheel)}
    cmd = [str(venv / "bin" / "pytest"), "-q", "-p", "no:cacheprovider", *paths]
    with log.open("w") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    if done.returncode != 0:
        print("\n".join(lines[-40:]), file=sys.stderr)
    summary = lines[-1].strip("= ") if lines else "no output"
    return done.returncode == 0, summary


def main(argv: list[str] | None = None) -> int:
    """Install and test each compiled wheel (module docstring); 0 if every run passed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument(
        "--no-integration", action="store_true", help="only the unit suite on each Python"
    )
    args = parser.parse_args(argv)
    # no pyenv here: this interpreter's CPython only
    pythons = find_pythons() or [Path(sys.executable)]
    results: list[str] = []
    failed = False
    for python in pythons:
        venv = venv_for(python)
        wheel = wheel_for(args.dist, python)
        own = venv.name == ".venv-mypyc"
        began = time.monotonic()
        install(python, venv, wheel, "[test,spark]" if own else "")
        installed = time.monotonic()
        print(f"=== {wheel.name} in {venv.name}: the unit tests", file=sys.stderr, flush=True)
        ok, summary = pytest(venv, wheel, ["tests/unit"], venv / "unit.log")
        failed |= not ok
        results.append(
            f"{wheel.name}: unit tests {'passed' if ok else 'FAILED'} ({summary}; install "
            f"{installed - began:.0f} s, tests {time.monotonic() - installed:.0f} s)"
        )
        if own and not args.no_integration:
            began = time.monotonic()
            print(f"=== {wheel.name}: {' '.join(INTEGRATION)}", file=sys.stderr, flush=True)
            ok, summary = pytest(venv, wheel, INTEGRATION, venv / "integration.log")
            failed |= not ok
            results.append(
                f"{wheel.name}: integration {'passed' if ok else 'FAILED'} ({summary}; "
                f"{time.monotonic() - began:.0f} s)"
            )
    print("\n".join(results))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
