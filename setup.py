"""Build hook for the optional compiled build (docs/compiled.md).

``pyproject.toml`` holds the project's metadata; this file only adds extension modules, and
only when ``AIOKPROD_MYPYC=1`` is set at build time: then mypyc compiles the modules below
from the same typed source (as black and mypy ship themselves). Without it, the build is
pure Python, and so is every editable install used for development.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from setuptools import Extension, setup

# The per-record send path, the Produce encoder/decoder, and the per-request path (the
# sender, its timer, the connection and its protocol state; docs/compiled.md says what each
# bought). Left interpreted, reasoned: the public facade (producer.py, lifecycle.py):
# compiled code checks argument types itself and would answer a wrong type with a bare
# TypeError instead of the typed aiokprod error the API promises; send() runs in
# internals/send_path.py instead, whose arguments are typed object and checked by our code.
COMPILED_MODULES = [
    "aiokprod/clock.py",
    "aiokprod/protocol/primitives.py",
    "aiokprod/protocol/records.py",
    "aiokprod/protocol/produce_fast.py",
    "aiokprod/internals/accumulator.py",
    "aiokprod/internals/appender.py",
    "aiokprod/internals/bulk_append.py",
    "aiokprod/internals/bulk_columns.py",
    "aiokprod/internals/batch.py",
    "aiokprod/internals/idempotence.py",
    "aiokprod/internals/sequences.py",
    "aiokprod/internals/producer_id.py",
    "aiokprod/internals/budget.py",
    "aiokprod/internals/partitioner.py",
    "aiokprod/internals/serialization.py",
    "aiokprod/internals/send_path.py",
    "aiokprod/internals/stats.py",
    "aiokprod/internals/sender.py",
    "aiokprod/internals/produce_response.py",
    "aiokprod/internals/pass_timer.py",
    "aiokprod/internals/adaptive.py",
    "aiokprod/internals/metadata.py",
    "aiokprod/internals/metadata_fetcher.py",
    "aiokprod/net/connection.py",
    "aiokprod/net/pool.py",
    "aiokprod/net/transport.py",
    "aiokprod/net/socket_stream.py",
    "aiokprod/net/inbox.py",
    "aiokprod/protocol/connection.py",
]

# mypyc's runtime passes an exception on to what a compiled coroutine awaits (a Future, say,
# when the coroutine is cancelled) with the three-argument throw(type, value, traceback),
# which CPython 3.12 deprecated: each cancellation or timeout of a compiled await then emits a
# DeprecationWarning, and where warnings are errors (pytest's filterwarnings, -W error) that
# warning replaces the CancelledError (mypyc issue 1214, open). The compiled build uses a copy
# of the runtime with the one-argument throw(value) on 3.12+, which carries the same traceback.
# make test-compiled on 3.12 and 3.13 fails without it (tests/unit/internals/test_budget.py).
_THROW_3 = "res = PyObject_CallFunctionObjArgs(_m, type, value, traceback, NULL);"
_THROW_1 = (
    "\n#if PY_VERSION_HEX >= 0x030C0000\n"
    "            res = PyObject_CallOneArg(_m, value);  /* aiokprod's setup.py */\n"
    "#else\n"
    f"            {_THROW_3}\n"
    "#endif\n"
)


def _with_patched_runtime(extensions: list[Extension], lib_rt: str) -> list[Extension]:
    """The extensions, compiled against a copy of mypyc's runtime with the fix above."""
    original = Path(lib_rt)
    patched = Path("build") / "mypyc-lib-rt"
    shutil.rmtree(patched, ignore_errors=True)
    shutil.copytree(original, patched)
    misc_ops = patched / "misc_ops.c"
    text = misc_ops.read_text(encoding="utf-8")
    if text.count(_THROW_3) != 1:
        print(f"setup.py: mypyc's {original}/misc_ops.c changed; built without the throw() fix")
        return extensions
    misc_ops.write_text(text.replace(_THROW_3, _THROW_1), encoding="utf-8")
    for extension in extensions:
        extension.include_dirs = [
            str(patched) if Path(d) == original else d for d in extension.include_dirs
        ]
    return extensions


ext_modules: list[Extension] = []
if os.environ.get("AIOKPROD_MYPYC") == "1":
    from mypyc.build import include_dir, mypycify

    ext_modules = _with_patched_runtime(mypycify(COMPILED_MODULES, opt_level="3"), include_dir())

setup(ext_modules=ext_modules)
