"""Generate the option tables of docs/configuration.md from the code.

The names, types and defaults come from ``aiokprod.config.ProducerConfig``'s fields; the Java
names and descriptions from ``OPTION_DOCS`` beside them in aiokprod/config.py. Two uses:

* mkdocs hook (``hooks:`` in mkdocs.yml): at build time the section between the markers in
  configuration.md is replaced with freshly generated tables. A field without a description,
  or a committed section that differs from the generated one, is logged as a warning, so
  ``mkdocs build --strict`` (``make docs``) fails and says what to do.
* script: ``python docs/gen_config.py`` prints the section; ``--write`` updates
  configuration.md in place; ``--check`` exits with 1 when the committed section is stale.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parent / "configuration.md"
START = "<!-- generated from aiokprod/config.py by docs/gen_config.py: edit the code, not this -->"
END = "<!-- end of generated options -->"

#: Sections of the reference, in order; options not listed land in "Other options".
GROUPS: dict[str, tuple[str, ...]] = {
    "Connecting": (
        "bootstrap_servers",
        "client_id",
        "socket_connection_setup_timeout_ms",
        "reconnect_backoff_ms",
        "reconnect_backoff_max_ms",
        "connections_max_idle_ms",
    ),
    "Delivery": (
        "acks",
        "enable_idempotence",
        "delivery_timeout_ms",
        "request_timeout_ms",
        "max_in_flight_requests_per_connection",
        "retries",
        "retry_backoff_ms",
        "retry_backoff_max_ms",
    ),
    "Batching and memory": (
        "linger_ms",
        "batch_size",
        "buffer_memory",
        "max_block_ms",
        "max_request_size",
        "compression_type",
        "compression_level",
    ),
    "Metadata and partitioning": (
        "metadata_max_age_ms",
        "metadata_max_idle_ms",
        "allow_auto_create_topics",
        "partitioner",
        "partitioner_ignore_keys",
    ),
    "Security (TLS and SASL)": (
        "security_protocol",
        "ssl_context",
        "ssl_cafile",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_check_hostname",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
        "sasl_oauth_token_provider",
    ),
    "Serialization and hooks": ("key_serializer", "value_serializer", "interceptors"),
}
_BYTE_OPTIONS = ("batch_size", "buffer_memory", "max_request_size")
_SPECIAL_DEFAULTS = {
    "bootstrap_servers": "(required)",
    "client_id": "`aiokprod-producer-N`",
    "acks": '`"all"` (-1)',
    "retries": "`2147483647` (Java's `Integer.MAX_VALUE`)",
}

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


def render_default(field: dataclasses.Field[Any]) -> str:
    """A field's default as the reference shows it."""
    if field.name in _SPECIAL_DEFAULTS:
        return _SPECIAL_DEFAULTS[field.name]
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "(required)"
    if isinstance(value, bool) or value is None:
        return f"`{value}`"
    if isinstance(value, int):
        if field.name in _BYTE_OPTIONS and value >= 1024:
            return f"`{value}` ({_bytes(value)})"
        if field.name.endswith("_ms") and value >= 1000:
            return f"`{value}` ({_duration(value)})"
        return f"`{value}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value!r}`"


def render_type(field: dataclasses.Field[Any]) -> str:
    """A field's annotation, readable in a table cell (no pipes)."""
    text = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    if field.name == "bootstrap_servers":
        text = "str | list[str]"
    if field.name == "acks":
        text = 'int | "all"'
    return " or ".join(f"`{part.strip()}`" for part in text.split("|"))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def generate() -> tuple[str, list[str]]:
    """The generated section (markers included) and the problems found."""
    from aiokprod.config import OPTION_DOCS, ProducerConfig

    fields = {f.name: f for f in dataclasses.fields(ProducerConfig)}
    problems = [
        f"ProducerConfig.{name} has no description: add it to OPTION_DOCS in aiokprod/config.py"
        for name in fields
        if name not in OPTION_DOCS
    ]
    problems += [
        f"OPTION_DOCS describes {name!r}, which is not a ProducerConfig field"
        for name in OPTION_DOCS
        if name not in fields
    ]
    grouped = {name for names in GROUPS.values() for name in names}
    sections = dict(GROUPS)
    others = tuple(name for name in fields if name not in grouped)
    if others:
        sections["Other options"] = others
    lines = [START, ""]
    for title, names in sections.items():
        present = [name for name in names if name in fields]
        if not present:
            continue
        lines += [f"### {title}", "", "| option | default | meaning |", "|---|---|---|"]
        for name in present:
            doc = OPTION_DOCS.get(name)
            java = f"Java: `{doc.java}`" if doc is not None and doc.java else "Java: —"
            text = doc.text if doc is not None else "*(no description yet)*"
            option = f"`{name}`<br><small>{render_type(fields[name])}; {java}</small>"
            cells = [option, render_default(fields[name]), text]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines), problems


def replace_section(markdown: str, section: str) -> str | None:
    """``markdown`` with its generated section replaced; None if the markers are missing."""
    if START not in markdown or END not in markdown:
        return None
    head, rest = markdown.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + section + tail


# --- mkdocs hook --------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Render the option tables into configuration.md (the mkdocs hook)."""
    if Path(page.file.src_path).name != PAGE.name:
        return markdown
    section, problems = generate()
    for problem in problems:
        log.warning(problem)
    updated = replace_section(markdown, section)
    if updated is None:
        log.warning("configuration.md lost its generated-section markers (%s ... %s)", START, END)
        return markdown
    if updated != markdown:
        log.warning(
            "docs/configuration.md is out of date with aiokprod/config.py: "
            "run `python docs/gen_config.py --write`"
        )
    return updated


# --- script -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Print, write or check the generated section."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="update docs/configuration.md")
    action.add_argument("--check", action="store_true", help="exit 1 if it is out of date")
    args = parser.parse_args(argv)
    section, problems = generate()
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    if not args.write and not args.check:
        print(section)
        return 1 if problems else 0
    current = PAGE.read_text(encoding="utf-8")
    updated = replace_section(current, section)
    if updated is None:
        print(f"{PAGE}: the markers {START!r} and {END!r} are missing", file=sys.stderr)
        return 1
    if args.check:
        stale = updated != current
        if stale:
            print(f"{PAGE} is out of date: run python docs/gen_config.py --write", file=sys.stderr)
        return 1 if stale or problems else 0
    if updated != current:
        PAGE.write_text(updated, encoding="utf-8")
        print(f"updated {PAGE}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
