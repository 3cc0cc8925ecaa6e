"""Check the release files ``make wheels`` leaves in a folder (docs/compiled.md, "Installing").

::

    python tools/check_wheels.py dist --python /path/to/python3.11 --python ...

One version, built from one source:

- the sdist, ``aiokprod-<version>.tar.gz``: every ``aiokprod`` source file, the top-level
  ``pyspark_aiokprod.py`` (PySpark's discovery of ``format("aiokprod")``) and what building
  needs (``pyproject.toml``, ``setup.py``, the build backend); no extension module;
- the pure-Python wheel, ``py3-none-any``: no extension module, every source file;
- one compiled wheel per ``--python`` (none without), tagged ``cpXY-cpXY-manylinux_2_17_<arch>``
  (and its alias ``manylinux2014_<arch>``, nothing newer): the same source files (the fallback
  for a module left interpreted, and what a traceback shows), an extension module built for
  that CPython for exactly the modules ``setup.py``'s ``COMPILED_MODULES`` lists, plus mypyc's
  shared runtime module; no RPATH or RUNPATH in any of them (the build machine's paths) and
  no glibc symbol version newer than 2.17 (read from the ELF files here, independently of the
  ``auditwheel`` that repaired them).

The wheels' metadata must agree. Then each wheel is unpacked into a scratch folder and imported
from there: the pure one by this interpreter must run no module compiled, each compiled one
by its own ``--python`` exactly the listed ones. Exits 1 with the problems listed, 0 if there
are none. The release workflow's sdist job runs it with no ``--python``.
"""

from __future__ import annotations

import argparse
import ast
import io
import platform
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: what the sdist needs besides the package to build either wheel
BUILD_FILES = frozenset(
    {
        "pyproject.toml",
        "setup.py",
        "build_backend/aiokprod_build.py",
        "README.md",
        "LICENSE",
        "PKG-INFO",
    }
)
#: top-level modules every release file carries beside the package (a source file each)
TOP_LEVEL_MODULES = frozenset({"pyspark_aiokprod.py"})
#: the manylinux floor of the compiled wheels: glibc 2.17 (manylinux2014)
GLIBC_FLOOR = (2, 17)
# "aiokprod/net/connection" + ".cpython-312-x86_64-linux-gnu" + ".so" (".cp312-win_amd64.pyd")
_EXTENSION = re.compile(r"(?P<module>[^.]+)(?P<abi>\.[^/]+)?\.(?:so|pyd)")
_GLIBC = re.compile(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?")


def listed_modules(setup_py: Path) -> list[str]:
    """The dotted names ``setup.py``'s ``COMPILED_MODULES`` lists, sorted."""
    for node in ast.parse(setup_py.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMPILED_MODULES" for t in node.targets
        ):
            paths = ast.literal_eval(node.value)
            return sorted(p.removesuffix(".py").replace("/", ".") for p in paths)
    raise SystemExit(f"{setup_py} has no COMPILED_MODULES list")


def source_files(package: Path) -> set[str]:
    """The files a wheel must carry: the package's sources, and the modules beside it.

    Every ``.py`` file of ``package`` and its ``py.typed``, and :data:`TOP_LEVEL_MODULES`.
    """
    files = {p for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    files.add(package / "py.typed")
    return {p.relative_to(package.parent).as_posix() for p in files} | TOP_LEVEL_MODULES


def extension_module(name: str) -> str | None:
    """The dotted module name of an extension file in a wheel, else None."""
    match = _EXTENSION.fullmatch(name)
    return match["module"].replace("/", ".") if match else None


def compiled_tag(python_tag: str, arch: str) -> str:
    """The tags a compiled wheel for ``python_tag`` (``cp312``) ends with, auditwheel's order."""
    return f"{python_tag}-{python_tag}-manylinux2014_{arch}.manylinux_2_17_{arch}"


def check_pure(wheel: zipfile.ZipFile, sources: set[str]) -> list[str]:
    """What is wrong with the pure-Python wheel (nothing: an empty list)."""
    names = set(wheel.namelist())
    problems = [f"missing source file {n}" for n in sorted(sources - names)]
    problems += [
        f"extension module {n} in the pure wheel" for n in sorted(names) if extension_module(n)
    ]
    if _wheel_field(wheel, "Root-Is-Purelib") != "true":
        problems.append("WHEEL does not say Root-Is-Purelib: true")
    return problems


def check_compiled(
    wheel: zipfile.ZipFile, sources: set[str], listed: list[str], python_tag: str | None = None
) -> list[str]:
    """What is wrong with a compiled wheel (nothing: an empty list).

    With ``python_tag`` (``cp312``) every extension module must be built for that CPython.
    """
    names = set(wheel.namelist())
    problems = [f"missing source file {n}" for n in sorted(sources - names)]
    modules = {m for m in map(extension_module, names) if m is not None}
    in_package = sorted(m for m in modules if m.startswith("aiokprod."))
    runtime = sorted(m for m in modules if not m.startswith("aiokprod."))
    if in_package != listed:
        missing = sorted(set(listed) - set(in_package))
        extra = sorted(set(in_package) - set(listed))
        problems.append(
            f"compiled modules differ from COMPILED_MODULES: missing {missing}, extra {extra}"
        )
    # mypyc puts the code of all modules in one shared library next to the package (its
    # name is a hash); each listed module is a small stub that loads it.
    if len(runtime) != 1 or not runtime[0].endswith("__mypyc"):
        problems.append(f"expected one mypyc runtime module outside the package, found {runtime}")
    if python_tag is not None:
        digits = python_tag.removeprefix("cp")
        problems += [
            f"{n} is not built for {python_tag}"
            for n in sorted(names)
            if extension_module(n) and not re.search(rf"\.(cpython-{digits}-|cp{digits}-)", n)
        ]
    if _wheel_field(wheel, "Root-Is-Purelib") != "false":
        problems.append("WHEEL does not say Root-Is-Purelib: false")
    return problems


def check_elf(name: str, data: bytes) -> list[str]:
    """What is wrong with an extension module for a manylinux_2_17 wheel (ELF, Linux).

    No RPATH/RUNPATH (pyenv's default link line leaves its own ``lib`` folder there), no
    glibc symbol version newer than :data:`GLIBC_FLOOR`.
    """
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    problems = []
    elf = ELFFile(io.BytesIO(data))
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            for tag in section.iter_tags():
                if tag.entry.d_tag in ("DT_RPATH", "DT_RUNPATH"):
                    path = getattr(tag, "runpath", None) or getattr(tag, "rpath", "")
                    problems.append(f"{name} has {tag.entry.d_tag} {path}")
        elif isinstance(section, GNUVerNeedSection):
            for _needed, versions in section.iter_versions():
                for version in versions:
                    match = _GLIBC.fullmatch(version.name)
                    if match and (int(match[1]), int(match[2])) > GLIBC_FLOOR:
                        problems.append(f"{name} needs {version.name}, newer than glibc 2.17")
    return problems


def check_linked(wheel: zipfile.ZipFile) -> list[str]:
    """:func:`check_elf` over every extension module in a wheel."""
    problems: list[str] = []
    for name in sorted(wheel.namelist()):
        if name.endswith(".so"):
            problems += check_elf(name, wheel.read(name))
    return problems


def check_sdist(sdist: tarfile.TarFile, sources: set[str], version: str) -> list[str]:
    """What is wrong with the sdist (nothing: an empty list)."""
    prefix = f"aiokprod-{version}/"
    names = {m.name.removeprefix(prefix) for m in sdist.getmembers() if m.isfile()}
    problems = [f"sdist lacks {n}" for n in sorted((sources | BUILD_FILES) - names)]
    problems += [f"extension module {n} in the sdist" for n in sorted(names) if _is_binary(n)]
    return problems


def check_same_metadata(pure: zipfile.ZipFile, compiled: zipfile.ZipFile) -> list[str]:
    """Both wheels must declare the same version and dependencies."""
    fields = ("Name", "Version", "Requires-Python", "Requires-Dist", "Provides-Extra")
    a, b = _metadata(pure), _metadata(compiled)
    return [
        f"METADATA {field} differs: {a.get_all(field)} vs {b.get_all(field)}"
        for field in fields
        if a.get_all(field) != b.get_all(field)
    ]


def running_compiled(wheel_path: Path, python: str = sys.executable) -> list[str]:
    """Unpack a wheel into a scratch folder and ask ``python`` which modules run compiled."""
    with tempfile.TemporaryDirectory(prefix="aiokprod-wheel-") as scratch:
        zipfile.ZipFile(wheel_path).extractall(scratch)
        code = (
            f"import sys; sys.path.insert(0, {scratch!r}); import aiokprod, aiokprod.compiled; "
            f"assert aiokprod.__file__.startswith({scratch!r}), aiokprod.__file__; "
            "print('\\n'.join(aiokprod.compiled.compiled_modules()))"
        )
        # -P: not the current folder first (it may hold the source tree).
        out = subprocess.run([python, "-P", "-c", code], capture_output=True, text=True, check=True)
        return [line for line in out.stdout.splitlines() if line]


def python_tag(python: str) -> str:
    """``cp312`` for a CPython 3.12 interpreter."""
    code = "import sys; print('cp%d%d' % sys.version_info[:2])"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def check_folder(folder: Path, pythons: list[str]) -> list[str]:
    """Every problem with the release files in ``folder`` (module docstring)."""
    files = sorted(p for p in folder.iterdir() if p.name.startswith("aiokprod-"))
    sdists = [p for p in files if p.name.endswith(".tar.gz")]
    pure = [p for p in files if p.name.endswith("-py3-none-any.whl")]
    arch = platform.machine()
    expected = {compiled_tag(python_tag(py), arch): py for py in pythons}
    compiled = {
        p: py for p in files for tag, py in expected.items() if p.name.endswith(f"-{tag}.whl")
    }
    if len(sdists) != 1 or len(pure) != 1 or len(compiled) != len(expected):
        wanted = ["the sdist", "a py3-none-any wheel", *(f"a {t} wheel" for t in expected)]
        return [f"expected {', '.join(wanted)}; found {[p.name for p in files]}"]
    unknown = sorted(set(files) - {*sdists, *pure, *compiled})
    if unknown:
        return [f"unexpected files: {[p.name for p in unknown]}"]
    sources = source_files(ROOT / "aiokprod")
    listed = listed_modules(ROOT / "setup.py")
    with zipfile.ZipFile(pure[0]) as p:
        problems = check_pure(p, sources)
        version = str(_metadata(p)["Version"])
        for path in compiled:
            with zipfile.ZipFile(path) as c:
                tag = path.name.split("-")[2]
                found = check_compiled(c, sources, listed, tag) + check_linked(c)
                found += check_same_metadata(p, c)
                problems += [f"{path.name}: {x}" for x in found]
    with tarfile.open(sdists[0]) as sdist:
        problems += check_sdist(sdist, sources, version)
    if problems:
        return problems
    if running_compiled(pure[0]):
        problems.append("the pure wheel, imported, runs modules compiled")
    for path, python in compiled.items():
        if running_compiled(path, python) != listed:
            problems.append(f"{path.name}, imported by {python}, does not run the listed modules")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Check the release files; print what is wrong; 0 if nothing, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, nargs="?", default=Path("dist"))
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        help="an interpreter whose compiled wheel must be there (repeatable)",
    )
    args = parser.parse_args(argv)
    problems = check_folder(args.folder, args.python)
    for problem in problems:
        print(f"{args.folder}: {problem}")
    if problems:
        return 1
    for path in sorted(args.folder.glob("aiokprod-*")):
        print(f"ok: {path.name} ({path.stat().st_size / 1024:,.0f} KiB)")
    return 0


def _is_binary(name: str) -> bool:
    return extension_module(name) is not None or name.endswith((".o", ".dylib", ".dll"))


def _wheel_field(wheel: zipfile.ZipFile, field: str) -> str | None:
    info = next(n for n in wheel.namelist() if n.endswith(".dist-info/WHEEL"))
    value = HeaderParser().parsestr(wheel.read(info).decode())[field]
    return None if value is None else str(value).strip()


def _metadata(wheel: zipfile.ZipFile) -> Message:
    info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    return HeaderParser().parsestr(wheel.read(info).decode())


if __name__ == "__main__":
    sys.exit(main())
