"""Build hook for the optional compiled build (docs/compiled.md).

``pyproject.toml`` holds the project's metadata; this file only adds extension modules, and
only when ``AIOKPROD_MYPYC=1`` is set at build time: then mypyc compiles the modules below
from the same typed source (as black and mypy ship themselves). Without it, the build is
pure Python, and so is every editable install used for development.
"""

from __future__ import annotations

import os

from setuptools import setup

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
    "aiokprod/internals/batch.py",
    "aiokprod/internals/budget.py",
    "aiokprod/internals/partitioner.py",
    "aiokprod/internals/serialization.py",
    "aiokprod/internals/send_path.py",
    "aiokprod/internals/stats.py",
    "aiokprod/internals/sender.py",
    "aiokprod/internals/produce_response.py",
    "aiokprod/internals/pass_timer.py",
    "aiokprod/net/connection.py",
    "aiokprod/net/pool.py",
    "aiokprod/net/transport.py",
    "aiokprod/protocol/connection.py",
]

ext_modules = []
if os.environ.get("AIOKPROD_MYPYC") == "1":
    from mypyc.build import mypycify

    ext_modules = mypycify(COMPILED_MODULES, opt_level="3")

setup(ext_modules=ext_modules)
