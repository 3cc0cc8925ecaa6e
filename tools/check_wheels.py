"""Check the release wheels ``make wheels`` leaves in a folder (docs/compiled.md, "Installing").

::

    python tools/check_wheels.py dist

Two wheels of the same version, built from the same source:

- the pure-Python one, ``py3-none-any``: no extension module, every ``aiokprod`` source file;
- the compiled one for the running CPython and platform: the same source files (the
  fallback for a module left interpreted, and what a traceback shows), an extension module
  for exactly the modules ``setup.py``'s ``COMPILED_MODULES`` lists, plus mypyc's shared
  runtime module.

Then each wheel is unpacked into a scratch folder and imported from there by this
interpreter: the pure one must run no module compiled, the compiled one exactly the listed
ones. Exits 1 with the problems listed, 0 if there are none.
"""

from __future__ import annotations

import ast
import importlib.machinery
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTENSION_SUFFIXES = tuple(sorted(importlib.machinery.EXTENSION_SUFFIXES, key=len, reverse=True))


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
    """The package's files a wheel must carry: every ``.py`` file and ``py.typed``."""
    files = {p for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    files.add(package / "py.typed")
    return {p.relative_to(package.parent).as_posix() for p in files}


def extension_module(name: str) -> str | None:
    """The dotted module name of an extension file in a wheel, else None."""
    for suffix in EXTENSION_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)].replace("/", ".")
    return None


def compiled_tag() -> str:
    """The wheel tag a compiled wheel for this interpreter and platform ends with."""
    version = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{version}-{version}-{platform}"


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


def check_compiled(wheel: zipfile.ZipFile, sources: set[str], listed: list[str]) -> list[str]:
    """What is wrong with the compiled wheel (nothing: an empty list)."""
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
    if _wheel_field(wheel, "Root-Is-Purelib") != "false":
        problems.append("WHEEL does not say Root-Is-Purelib: false")
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


def running_compiled(wheel_path: Path) -> list[str]:
    """Unpack a wheel into a scratch folder and ask it which of its modules run compiled."""
    with tempfile.TemporaryDirectory(prefix="aiokprod-wheel-") as scratch:
        zipfile.ZipFile(wheel_path).extractall(scratch)
        code = (
            f"import sys; sys.path.insert(0, {scratch!r}); import aiokprod, aiokprod.compiled; "
            f"assert aiokprod.__file__.startswith({scratch!r}), aiokprod.__file__; "
            "print('\\n'.join(aiokprod.compiled.compiled_modules()))"
        )
        # -P: not the current folder first (it may hold the source tree).
        out = subprocess.run(
            [sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True
        )
        return [line for line in out.stdout.splitlines() if line]


def main(folder: Path) -> int:
    """Check the wheels in ``folder``; print what is wrong; 0 if nothing, else 1."""
    wheels = sorted(folder.glob("aiokprod-*.whl"))
    pure = [w for w in wheels if w.name.endswith("-py3-none-any.whl")]
    compiled = [w for w in wheels if w.name.endswith(f"-{compiled_tag()}.whl")]
    if len(pure) != 1 or len(compiled) != 1 or len(wheels) != 2:
        names = [w.name for w in wheels]
        print(f"expected one pure and one {compiled_tag()} wheel in {folder}, found {names}")
        return 1
    sources = source_files(ROOT / "aiokprod")
    listed = listed_modules(ROOT / "setup.py")
    with zipfile.ZipFile(pure[0]) as p, zipfile.ZipFile(compiled[0]) as c:
        problems = check_pure(p, sources) + check_compiled(c, sources, listed)
        problems += check_same_metadata(p, c)
    if not problems:
        if running_compiled(pure[0]):
            problems.append("the pure wheel, imported, runs modules compiled")
        if running_compiled(compiled[0]) != listed:
            problems.append(
                "the compiled wheel, imported, does not run the listed modules compiled"
            )
    for problem in problems:
        print(f"{folder}: {problem}")
    if problems:
        return 1
    for wheel in (pure[0], compiled[0]):
        print(f"ok: {wheel.name} ({wheel.stat().st_size / 1024:,.0f} KiB)")
    return 0


def _wheel_field(wheel: zipfile.ZipFile, field: str) -> str | None:
    info = next(n for n in wheel.namelist() if n.endswith(".dist-info/WHEEL"))
    value = HeaderParser().parsestr(wheel.read(info).decode())[field]
    return None if value is None else str(value).strip()


def _metadata(wheel: zipfile.ZipFile) -> Message:
    info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    return HeaderParser().parsestr(wheel.read(info).decode())


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "dist")))
