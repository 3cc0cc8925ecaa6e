"""The release tooling (docs/compiled.md): which Pythons, the build backend, the promise.

``make wheels``, ``make test-compiled`` and ``make lint`` run the tools on the real files;
here each tool is shown to decide right on made-up input, and to refuse what is wrong.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import sys
import tomllib
import warnings
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

import aiokprod
from aiokprod.cli import main as cli_main
from aiokprod.compiled import compiled_modules, describe_build

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_newest_release_of_each_cpython_from_3_11(pythons: ModuleType, tmp_path: Path) -> None:
    for name in ("3.10.13", "3.11.2", "3.11.7", "3.12.1", "3.13.0", "3.13.0t", "3.14-dev"):
        python = tmp_path / "versions" / name / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.touch()
    (tmp_path / "versions" / "3.12.9").mkdir()  # no interpreter in it
    found = pythons.pyenv_pythons(tmp_path)
    assert [p.parts[-3] for p in found] == ["3.11.7", "3.12.1", "3.13.0"]


def test_pythons_from_the_environment_skip_the_old_and_the_skipped(pythons: ModuleType) -> None:
    this = "{}.{}".format(*sys.version_info[:2])
    assert pythons.find_pythons({"PYTHONS": sys.executable}) == [Path(sys.executable)]
    assert pythons.find_pythons({"PYTHONS": sys.executable, "SKIP_PYTHONS": this}) == []


@pytest.fixture
def backend(build_backend: ModuleType, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The build backend, run from the project's root as a frontend runs it."""
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("AIOKPROD_MYPYC", raising=False)
    return build_backend


def test_the_backend_asks_for_mypy_only_when_asked_to_compile(
    backend: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    pure = backend.get_requires_for_build_wheel()
    assert not any(r.startswith("mypy") for r in pure)
    monkeypatch.setenv("AIOKPROD_MYPYC", "1")
    compiled = backend.get_requires_for_build_wheel()
    # the pinned compiler, and every runtime dependency mypyc type-checks against
    assert [r for r in compiled if r.startswith("mypy")] == list(backend.MYPYC_REQUIRES)
    assert set(PYPROJECT["project"]["dependencies"]) <= set(compiled)
    assert set(pure) <= set(compiled)
    assert os.environ["AIOKPROD_MYPYC"] == "1"  # put back after asking setuptools


def test_the_backend_refuses_a_compiled_editable_install(
    backend: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIOKPROD_MYPYC", "1")
    with pytest.raises(RuntimeError, match="editable install is always pure Python"):
        backend.build_editable(str(tmp_path))


def test_the_backend_is_named_and_shipped(check_wheels: ModuleType) -> None:
    system = PYPROJECT["build-system"]
    assert system["build-backend"] == "aiokprod_build"
    assert (ROOT / system["backend-path"][0] / "aiokprod_build.py").is_file()
    assert "build_backend/aiokprod_build.py" in check_wheels.BUILD_FILES


def test_the_release_copies_what_the_unit_tests_read() -> None:
    # The release workflow runs the unit suite in a scratch folder holding only these: the
    # tests; the source tree (test_layering.py, test_file_map.py and test_compiled.py read it);
    # docs/design.md (test_file_map.py); setup.py's list; tools/ and build_backend/ (loaded
    # from their files by tests/unit/conftest.py); pyproject.toml (pytest's and mypy's settings).
    sources = set(PYPROJECT["tool"]["cibuildwheel"]["test-sources"])
    read = {"tests", "aiokprod", "docs/design.md", "setup.py", "tools", "build_backend"}
    assert read | {"pyproject.toml"} <= sources
    assert all((ROOT / source).exists() for source in sources)


def test_the_wheel_tests_group_is_a_subset_of_the_test_extra() -> None:
    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[<>=!;\[ ]", r, maxsplit=1)[0].lower() for r in requirements}

    group = names(PYPROJECT["dependency-groups"]["wheel-tests"])
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert group - names(extras["test"]) == {"pyspark"}
    assert "pyspark" in names(extras["spark"])


def test_the_release_promises_the_classified_pythons_everywhere(check_release: ModuleType) -> None:
    pythons = check_release.classified_pythons()
    assert pythons == ["cp311", "cp312", "cp313"]
    promised = check_release.promised(pythons)
    assert promised[("linux", "aarch64")] == sorted(
        f"{py}-{libc}_aarch64" for py in pythons for libc in ("manylinux", "musllinux")
    )
    assert sum(len(ids) for ids in promised.values()) == 21


def test_the_files_to_publish_are_checked_against_the_promise(
    check_release: ModuleType, tmp_path: Path
) -> None:
    names = ["aiokprod-0.1.0.tar.gz", "aiokprod-0.1.0-py3-none-any.whl"]
    for py in ("cp311", "cp312", "cp313"):
        for platform in (
            "manylinux2014_x86_64.manylinux_2_17_x86_64",
            "musllinux_1_2_x86_64",
            "manylinux2014_aarch64.manylinux_2_17_aarch64",
            "musllinux_1_2_aarch64",
            "macosx_11_0_arm64",
            "macosx_10_13_x86_64",
            "win_amd64",
        ):
            names.append(f"aiokprod-0.1.0-{py}-{py}-{platform}.whl")
    for name in names:
        (tmp_path / name).touch()
    assert check_release.check_dist(tmp_path) == []
    (tmp_path / "aiokprod-0.1.0-cp313-cp313-win_amd64.whl").unlink()
    (tmp_path / "aiokprod-0.1.0-cp311-cp311-linux_x86_64.whl").touch()
    assert check_release.check_dist(tmp_path) == [
        "cp313-win_amd64: expected one wheel, found []",
        "not promised: aiokprod-0.1.0-cp311-cp311-linux_x86_64.whl",
    ]


def test_version_says_which_build_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main(["--version"])
    assert exited.value.code == 0
    line = capsys.readouterr().out.strip()
    assert line == describe_build()
    assert line.startswith(f"aiokprod {aiokprod.__version__}, ")
    if os.environ.get("AIOKPROD_EXPECT_COMPILED") == "1":
        assert f"compiled (mypyc, {len(compiled_modules())} modules)" in line
    else:
        assert "pure Python" in line


def test_the_guard_refuses_aiokprod_from_the_source_tree(wheel_guard: ModuleType) -> None:
    package = Path(aiokprod.__file__).resolve().parent
    problem = wheel_guard.compiled_install_problem(None, source_root=package.parent)
    assert problem is not None
    assert "imported from the source tree" in problem


def test_the_guard_finds_an_installed_file_that_is_not_the_wheels(
    wheel_guard: ModuleType, tmp_path: Path
) -> None:
    files = {"aiokprod/a.py": b"x = 1\n", "3f2a__mypyc.so": b"\x7fELF"}

    def digest(data: bytes) -> str:
        raw = hashlib.sha256(data).digest()
        return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    wheel = tmp_path / "aiokprod-0.1.0-cp311-cp311-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        record = [f"{name},{digest(data)},{len(data)}" for name, data in files.items()]
        record.append("aiokprod-0.1.0.dist-info/RECORD,,")
        archive.writestr("aiokprod-0.1.0.dist-info/RECORD", "\n".join(record) + "\n")
    site = tmp_path / "site"
    for name, data in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(data)
    guard = wheel_guard
    assert guard.installed_differs(wheel, site) is None
    (site / "3f2a__mypyc.so").write_bytes(b"\x7fELF, another build")
    assert "3f2a__mypyc.so is not the file in" in guard.installed_differs(wheel, site)
    (site / "aiokprod/a.py").unlink()
    assert "aiokprod/a.py of" in guard.installed_differs(wheel, site)


def test_an_editable_install_is_quiet_and_discoverable_by_spark(
    backend: ModuleType, tmp_path: Path
) -> None:
    if not (ROOT / "README.md").is_file():
        pytest.skip("not the whole project (a wheel's test folder): nothing to build from")
    # pip showed setuptools' "Editable installation." note as a BuildBackendWarning on every
    # `make demo`/`make test` that installs the package (issue 39); the backend silences it.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wheel = backend.build_editable(str(tmp_path))
    assert [str(w.message) for w in caught if "Editable installation" in str(w.message)] == []
    # PySpark's pkgutil.iter_modules() sees files, not setuptools' finder: a real copy of the
    # pyspark_* module, listed in RECORD with its hash (format("aiokprod") without register)
    with zipfile.ZipFile(tmp_path / wheel) as editable:
        module = editable.read("pyspark_aiokprod.py")
        (record,) = [n for n in editable.namelist() if n.endswith(".dist-info/RECORD")]
        lines = editable.read(record).decode().splitlines()
    assert module == (ROOT / "pyspark_aiokprod.py").read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(module).digest()).rstrip(b"=").decode()
    assert f"pyspark_aiokprod.py,sha256={digest},{len(module)}" in lines
