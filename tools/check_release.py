"""Check the release workflow's promise (docs/compiled.md, "Releasing").

::

    python tools/check_release.py              # make lint: the cibuildwheel settings
    python tools/check_release.py --dist dist  # the workflow's publish job: the files

The promise: a compiled wheel for every CPython the project classifies itself for
(pyproject.toml's ``Programming Language :: Python :: 3.X``) on each of :data:`PLATFORMS`,
plus the pure-Python wheel and the sdist.

Without ``--dist``: ``cibuildwheel --print-build-identifiers`` on ``[tool.cibuildwheel]``, for
each platform and architecture the workflow has a runner for, must select exactly those
builds; and the workflow must install the cibuildwheel that answered (the one pinned in the dev
extra), so that what is checked here is what runs there. (``make lint`` runs actionlint on the
workflow itself.)

With ``--dist DIR``: DIR must hold one wheel for each promised build, one pure wheel, one
sdist, and nothing else. Exits 1 with the problems listed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
#: (cibuildwheel platform, architecture, the platform part of its build identifiers); the
#: workflow has one runner for each platform and architecture
PLATFORMS = (
    ("linux", "x86_64", ("manylinux_x86_64", "musllinux_x86_64")),
    ("linux", "aarch64", ("manylinux_aarch64", "musllinux_aarch64")),
    ("macos", "arm64", ("macosx_arm64",)),
    ("macos", "x86_64", ("macosx_x86_64",)),
    ("windows", "AMD64", ("win_amd64",)),
)
_CLASSIFIER = re.compile(r"Programming Language :: Python :: 3\.(\d+)")


def classified_pythons(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """``cp311``, ... for each ``Programming Language :: Python :: 3.X`` classifier."""
    classifiers = tomllib.loads(pyproject.read_text())["project"]["classifiers"]
    minors = sorted(int(m[1]) for c in classifiers if (m := _CLASSIFIER.fullmatch(c)))
    return [f"cp3{minor}" for minor in minors]


def promised(pythons: list[str]) -> dict[tuple[str, str], list[str]]:
    """(platform, architecture) -> the build identifiers promised there, sorted."""
    return {
        (platform, arch): sorted(f"{py}-{tail}" for py in pythons for tail in tails)
        for platform, arch, tails in PLATFORMS
    }


def selected(platform: str, arch: str) -> list[str]:
    """What ``[tool.cibuildwheel]`` selects for a platform and architecture, sorted."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cibuildwheel",
            "--print-build-identifiers",
            f"--platform={platform}",
            f"--archs={arch}",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return sorted(out.stdout.split())


def check_settings() -> list[str]:
    """What is wrong with ``[tool.cibuildwheel]`` and the workflow's cibuildwheel pin."""
    problems = []
    for (platform, arch), wanted in promised(classified_pythons()).items():
        got = selected(platform, arch)
        if got != wanted:
            problems.append(f"{platform} {arch}: cibuildwheel selects {got}, promised {wanted}")
    version = importlib.metadata.version("cibuildwheel")
    pins = re.findall(r"cibuildwheel==([\w.]+)", WORKFLOW.read_text())
    if pins != [version]:
        problems.append(
            f"{WORKFLOW.name} installs cibuildwheel {pins}, the settings were checked with "
            f"{version} (pin the same in pyproject.toml's dev extra and the workflow)"
        )
    return problems


def wheel_matches(name: str, identifier: str) -> bool:
    """Whether a wheel file is the build of a cibuildwheel identifier.

    ``cp312-manylinux_x86_64`` is ``...-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64
    .whl``; ``cp312-macosx_arm64`` is ``...-cp312-cp312-macosx_11_0_arm64.whl``.
    """
    python, _, platform = identifier.partition("-")
    family, _, arch = platform.partition("_")
    return f"-{python}-{python}-{family}" in name and name.endswith(f"_{arch}.whl")


def check_dist(dist: Path) -> list[str]:
    """What is missing from, or extra in, the files to publish."""
    files = sorted(p.name for p in dist.iterdir())
    problems = []
    claimed = {f for f in files if f.endswith(("-py3-none-any.whl", ".tar.gz"))}
    if len(claimed) != 2:
        problems.append(f"expected one pure wheel and one sdist, found {sorted(claimed)}")
    for identifier in sorted(i for ids in promised(classified_pythons()).values() for i in ids):
        matches = [f for f in files if wheel_matches(f, identifier)]
        if len(matches) != 1:
            problems.append(f"{identifier}: expected one wheel, found {matches}")
        claimed.update(matches)
    problems += [f"not promised: {f}" for f in files if f not in claimed]
    return problems


def main(argv: list[str] | None = None) -> int:
    """Run the check (module docstring); 0 if nothing is wrong."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", type=Path, help="check the files to publish in this folder")
    args = parser.parse_args(argv)
    problems = check_dist(args.dist) if args.dist else check_settings()
    for problem in problems:
        print(f"check_release: {problem}")
    if not problems:
        builds = sum(len(ids) for ids in promised(classified_pythons()).values())
        print(f"check_release: ok ({builds} compiled wheels promised, {len(PLATFORMS)} runners)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
