"""Generate what the option table in aiokprod/config/table.py implies, and check it is current.

Two generated sections, both from ``aiokprod.config.OPTIONS`` (the rows of ``ProducerConfig``):

* the option tables of docs/configuration.md (names, types, defaults, Java names, texts,
  grouped as the table groups them);
* the ``ProducerOptions`` TypedDict in aiokprod/config/typed_options.py, from each option's
  ``accepts`` type, so that type checkers know ``Producer(**options)``.

Two uses:

* mkdocs hook (``hooks:`` in mkdocs.yml): at build time the section between the markers in
  configuration.md is replaced with freshly generated tables. A committed section (of either
  file) that differs from the generated one is logged as a warning, so
  ``mkdocs build --strict`` (``make docs``) fails and says what to do.
* script: ``python docs/gen_config.py`` prints the docs section; ``--write`` updates both
  files in place; ``--check`` exits with 1 when either committed section is stale.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parent / "configuration.md"
START = (
    "<!-- generated from aiokprod/config/table.py by docs/gen_config.py: "
    "edit the code, not this -->"
)
END = "<!-- end of generated options -->"
TYPED = Path(__file__).resolve().parents[1] / "aiokprod" / "config" / "typed_options.py"
TYPED_START = "# <generated ProducerOptions>"
TYPED_END = "# </generated ProducerOptions>"
#: Options passed by position or by their own parameter, not as ``**options``.
NOT_KEYWORD = ("bootstrap_servers",)

_BYTE_OPTIONS = ("batch_size", "buffer_memory", "max_request_size")
#: How the reference shows a type where the stored one is not what users pass.
_SHOWN_TYPES = {"bootstrap_servers": "str | list[str]", "acks": 'int | "all"'}

log = logging.getLogger("mkdocs.hooks.gen_config")


def _bytes(value: int) -> str:
    for unit, size in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if value >= size and value % size == 0:
            return f"{value // size} {unit}"
    return f"{value} B"


def _duration(ms: int) -> str:
    if ms % 60_000 == 0:
        return f"{ms // 60_000} min"
    return f"{ms / 1000:g} s"


def render_default(option: Any) -> str:
    """An option's default as the reference shows it."""
    if option.shown_default is not None:
        return str(option.shown_default)
    value = option.default
    if value is dataclasses.MISSING:
        return "(required)"
    if isinstance(value, bool) or value is None:
        return f"`{value}`"
    if isinstance(value, int):
        if option.name in _BYTE_OPTIONS and value >= 1024:
            return f"`{value}` ({_bytes(value)})"
        if option.name.endswith("_ms") and value >= 1000:
            return f"`{value}` ({_duration(value)})"
        return f"`{value}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value!r}`"


def render_type(option: Any) -> str:
    """An option's stored type, readable in a table cell (no pipes)."""
    text = _SHOWN_TYPES.get(option.name, option.type)
    return " or ".join(f"`{part.strip()}`" for part in text.split("|"))


def render_java(option: Any) -> str:
    """The Java side of an option: its exact names, or a note, or a dash."""
    if option.java:
        return "Java: " + " / ".join(f"`{name}`" for name in option.java)
    if option.java_note:
        return f"Java: `{option.java_note}`"
    return "Java: —"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def generate() -> tuple[str, list[str]]:
    """The generated docs section (markers included) and the problems found."""
    from aiokprod.config import OPTIONS

    problems = [f"option {name} has no doc text" for name, o in OPTIONS.items() if not o.doc]
    sections: dict[str, list[Any]] = {}
    for option in OPTIONS.values():
        sections.setdefault(option.group, []).append(option)
    lines = [START, ""]
    for title, options in sections.items():
        lines += [f"### {title}", "", "| option | default | meaning |", "|---|---|---|"]
        for option in options:
            name = f"`{option.name}`<br><small>{render_type(option)}; {render_java(option)}</small>"
            cells = [name, render_default(option), option.doc]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines), problems


def generate_typed_options() -> str:
    """The ``ProducerOptions`` TypedDict of aiokprod/config/typed_options.py (with markers)."""
    from aiokprod.config import OPTIONS

    lines = [
        TYPED_START,
        "class ProducerOptions(TypedDict, total=False):",
        '    """The producer\'s keyword options and the types they accept (see '
        'docs/configuration.md)."""',
        "",
    ]
    lines += [f"    {o.name}: {o.accepts}" for o in OPTIONS.values() if o.name not in NOT_KEYWORD]
    lines.append(TYPED_END)
    return "\n".join(lines)


def replace_between(text: str, start: str, end: str, section: str) -> str | None:
    """``text`` with the part from ``start`` to ``end`` replaced; None if a marker is missing."""
    if start not in text or end not in text:
        return None
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + section + tail


def replace_section(markdown: str, section: str) -> str | None:
    """``markdown`` with its generated section replaced; None if the markers are missing."""
    return replace_between(markdown, START, END, section)


def typed_options_current() -> bool:
    """Whether aiokprod/config/typed_options.py holds the ProducerOptions the table implies."""
    source = TYPED.read_text(encoding="utf-8")
    updated = replace_between(source, TYPED_START, TYPED_END, generate_typed_options())
    return updated == source


# --- mkdocs hook --------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Render the option tables into configuration.md (the mkdocs hook)."""
    if Path(page.file.src_path).name != PAGE.name:
        return markdown
    section, problems = generate()
    for problem in problems:
        log.warning(problem)
    if not typed_options_current():
        log.warning(
            "ProducerOptions in aiokprod/config/typed_options.py is out of date with the option "
            "table: run `python docs/gen_config.py --write`"
        )
    updated = replace_section(markdown, section)
    if updated is None:
        log.warning("configuration.md lost its generated-section markers (%s ... %s)", START, END)
        return markdown
    if updated != markdown:
        log.warning(
            "docs/configuration.md is out of date with aiokprod/config/table.py: "
            "run `python docs/gen_config.py --write`"
        )
    return updated


# --- script -------------------------------------------------------------------------------


def _update(path: Path, start: str, end: str, section: str, write: bool) -> bool | None:
    """Whether ``path``'s section was stale (and rewritten when ``write``); None: no markers."""
    current = path.read_text(encoding="utf-8")
    updated = replace_between(current, start, end, section)
    if updated is None:
        print(f"{path}: the markers {start!r} and {end!r} are missing", file=sys.stderr)
        return None
    stale = updated != current
    if stale and write:
        path.write_text(updated, encoding="utf-8")
        print(f"updated {path}")
    elif stale:
        print(f"{path} is out of date: run python docs/gen_config.py --write", file=sys.stderr)
    return stale


def main(argv: list[str] | None = None) -> int:
    """Print, write or check the generated sections."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="update both generated sections")
    action.add_argument("--check", action="store_true", help="exit 1 if one is out of date")
    args = parser.parse_args(argv)
    section, problems = generate()
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    if not args.write and not args.check:
        print(section)
        return 1 if problems else 0
    results = [
        _update(PAGE, START, END, section, args.write),
        _update(TYPED, TYPED_START, TYPED_END, generate_typed_options(), args.write),
    ]
    if None in results or problems:
        return 1
    return 1 if args.check and any(results) else 0


if __name__ == "__main__":
    sys.exit(main())
