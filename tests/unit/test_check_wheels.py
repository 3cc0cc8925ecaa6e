"""tools/check_wheels.py, the check ``make wheels`` runs on the release wheels.

The real wheels are built and checked by ``make wheels`` (CI runs it); here the check itself
is shown to refuse what a broken build would produce, on wheels made up in a scratch folder.
"""

from __future__ import annotations

import importlib.machinery
import io
import platform
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SO = importlib.machinery.EXTENSION_SUFFIXES[0]  # this interpreter's, e.g. ".cpython-311-...so"
SOURCES = {"aiokprod/__init__.py", "aiokprod/a.py", "aiokprod/sub/b.py", "aiokprod/py.typed"}
LISTED = ["aiokprod.a", "aiokprod.sub.b"]
PYPROJECT_MODULES = [
    f"{m}.py"
    for m in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "py-modules"
    ]
]
METADATA = "Metadata-Version: 2.1\nName: aiokprod\nVersion: 0.1.0\nRequires-Dist: mmh3>=4.1\n"


def _wheel(path: Path, files: set[str], purelib: bool, metadata: str = METADATA) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        for name in sorted(files):
            wheel.writestr(name, b"")
        wheel.writestr("aiokprod-0.1.0.dist-info/METADATA", metadata)
        root_is_purelib = "true" if purelib else "false"
        wheel.writestr("aiokprod-0.1.0.dist-info/WHEEL", f"Root-Is-Purelib: {root_is_purelib}\n")
    return path


def _compiled_files(modules: list[str]) -> set[str]:
    return SOURCES | {m.replace(".", "/") + SO for m in modules} | {"3f2a__mypyc" + SO}


def test_good_wheels_pass(check_wheels: ModuleType, tmp_path: Path) -> None:
    pure = _wheel(tmp_path / "p.whl", SOURCES, purelib=True)
    compiled = _wheel(tmp_path / "c.whl", _compiled_files(LISTED), purelib=False)
    with zipfile.ZipFile(pure) as p, zipfile.ZipFile(compiled) as c:
        assert check_wheels.check_pure(p, SOURCES) == []
        assert check_wheels.check_compiled(c, SOURCES, LISTED) == []
        assert check_wheels.check_same_metadata(p, c) == []


def test_a_pure_wheel_with_an_extension_module_or_a_missing_source_fails(
    check_wheels: ModuleType, tmp_path: Path
) -> None:
    files = (SOURCES - {"aiokprod/sub/b.py"}) | {"aiokprod/a" + SO}
    with zipfile.ZipFile(_wheel(tmp_path / "p.whl", files, purelib=True)) as p:
        problems = check_wheels.check_pure(p, SOURCES)
    assert any("missing source file aiokprod/sub/b.py" in x for x in problems)
    assert any("extension module aiokprod/a" in x for x in problems)


def test_a_compiled_wheel_must_compile_exactly_the_listed_modules(
    check_wheels: ModuleType, tmp_path: Path
) -> None:
    short = _wheel(tmp_path / "c1.whl", _compiled_files(["aiokprod.a"]), purelib=False)
    extra = _wheel(
        tmp_path / "c2.whl", _compiled_files([*LISTED, "aiokprod.__init__"]), purelib=False
    )
    pure_tag = _wheel(tmp_path / "c3.whl", _compiled_files(LISTED), purelib=True)
    no_runtime = _wheel(
        tmp_path / "c4.whl", _compiled_files(LISTED) - {"3f2a__mypyc" + SO}, purelib=False
    )
    with zipfile.ZipFile(short) as c:
        assert "missing ['aiokprod.sub.b']" in " ".join(
            check_wheels.check_compiled(c, SOURCES, LISTED)
        )
    with zipfile.ZipFile(extra) as c:
        assert "extra ['aiokprod.__init__']" in " ".join(
            check_wheels.check_compiled(c, SOURCES, LISTED)
        )
    with zipfile.ZipFile(pure_tag) as c:
        assert "Root-Is-Purelib: false" in " ".join(check_wheels.check_compiled(c, SOURCES, LISTED))
    with zipfile.ZipFile(no_runtime) as c:
        assert "mypyc runtime" in " ".join(check_wheels.check_compiled(c, SOURCES, LISTED))


def test_wheels_of_different_versions_or_dependencies_fail(
    check_wheels: ModuleType, tmp_path: Path
) -> None:
    pure = _wheel(tmp_path / "p.whl", SOURCES, purelib=True)
    other = METADATA.replace("mmh3>=4.1", "mmh3>=5")
    compiled = _wheel(tmp_path / "c.whl", _compiled_files(LISTED), purelib=False, metadata=other)
    with zipfile.ZipFile(pure) as p, zipfile.ZipFile(compiled) as c:
        assert any("Requires-Dist" in x for x in check_wheels.check_same_metadata(p, c))


def test_the_source_list_and_compiled_list_come_from_the_tree(check_wheels: ModuleType) -> None:
    sources = check_wheels.source_files(ROOT / "aiokprod")
    assert "aiokprod/py.typed" in sources
    assert "aiokprod/internals/send_path.py" in sources
    assert "aiokprod.internals.send_path" in check_wheels.listed_modules(ROOT / "setup.py")
    # PySpark's discovery of format("aiokprod") (issue 39): a wheel without it fails
    assert "pyspark_aiokprod.py" in sources
    assert "pyspark_aiokprod.py" in PYPROJECT_MODULES


def test_extension_modules_built_for_another_cpython_fail(
    check_wheels: ModuleType, tmp_path: Path
) -> None:
    compiled = _wheel(tmp_path / "c.whl", _compiled_files(LISTED), purelib=False)
    this = "cp{}{}".format(*sys.version_info[:2])
    with zipfile.ZipFile(compiled) as c:
        assert check_wheels.check_compiled(c, SOURCES, LISTED, this) == []
        problems = check_wheels.check_compiled(c, SOURCES, LISTED, "cp399")
    assert len(problems) == 3  # the two modules and the runtime
    assert all("is not built for cp399" in x for x in problems)


def _sdist(path: Path, files: set[str]) -> Path:
    with tarfile.open(path, "w:gz") as sdist:
        for name in sorted(files):
            info = tarfile.TarInfo(f"aiokprod-0.1.0/{name}")
            sdist.addfile(info, io.BytesIO(b""))
    return path


def test_an_sdist_must_carry_the_sources_and_the_build_backend(
    check_wheels: ModuleType, tmp_path: Path
) -> None:
    complete = SOURCES | check_wheels.BUILD_FILES
    with tarfile.open(_sdist(tmp_path / "ok.tar.gz", complete)) as sdist:
        assert check_wheels.check_sdist(sdist, SOURCES, "0.1.0") == []
    broken = (complete - {"build_backend/aiokprod_build.py"}) | {"aiokprod/a" + SO}
    with tarfile.open(_sdist(tmp_path / "broken.tar.gz", broken)) as sdist:
        problems = check_wheels.check_sdist(sdist, SOURCES, "0.1.0")
    assert "sdist lacks build_backend/aiokprod_build.py" in problems
    assert f"extension module aiokprod/a{SO} in the sdist" in problems


def test_the_folder_must_hold_exactly_the_release_files(
    check_wheels: ModuleType, tmp_path: Path
) -> None:
    tag = check_wheels.compiled_tag(check_wheels.python_tag(sys.executable), "x86_64")
    for name in ("aiokprod-0.1.0.tar.gz", "aiokprod-0.1.0-py3-none-any.whl"):
        (tmp_path / name).touch()
    missing = check_wheels.check_folder(tmp_path, [sys.executable])
    assert len(missing) == 1
    assert f"a {tag} wheel" in missing[0]
    # the unrepaired wheel (linux_x86_64, which the index refuses) is no substitute
    (tmp_path / "aiokprod-0.1.0-cp311-cp311-linux_x86_64.whl").touch()
    assert check_wheels.check_folder(tmp_path, [])[0].startswith("unexpected files")


@pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("gcc") is None, reason="builds an ELF file with gcc"
)
def test_a_runpath_or_a_glibc_symbol_newer_than_2_17_fails(
    check_wheels: ModuleType, tmp_path: Path
) -> None:
    pytest.importorskip("elftools", reason="pyelftools comes with auditwheel (the dev extra)")
    source = tmp_path / "m.c"
    # pow() is GLIBC_2.29 when built against a newer glibc, GLIBC_2.2.5 against an old one
    source.write_text("#include <math.h>\ndouble f(double x, double y) { return pow(x, y); }\n")

    def build(name: str, *flags: str) -> bytes:
        out = tmp_path / name
        cmd = ["gcc", "-O2", "-shared", "-fPIC", *flags, "-o", str(out), str(source), "-lm"]
        subprocess.run(cmd, check=True)
        return out.read_bytes()

    with_runpath = check_wheels.check_elf("r.so", build("r.so", "-Wl,-rpath,/opt/py/lib"))
    assert any("has DT_RUNPATH /opt/py/lib" in x for x in with_runpath)
    plain = check_wheels.check_elf("p.so", build("p.so"))
    assert not any("RUNPATH" in x for x in plain)
    libc, version = platform.libc_ver()
    if libc == "glibc" and tuple(map(int, version.split(".")[:2])) >= (2, 29):
        assert plain == ["p.so needs GLIBC_2.29, newer than glibc 2.17"]
