"""The page every HTML report is: one self-contained file (inline CSS and JS, no
network), and the escape every string from a program or a path goes through."""

from __future__ import annotations

from html import escape

from .html_assets import CSS, SCRIPT


def e(value: object) -> str:
    """Escaped for HTML text and attribute values (quotes too)."""
    return escape(str(value), quote=True)


def page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{e(title)}</title>"
        f"<style>{CSS}</style></head><body>{body}<script>{SCRIPT}</script></body></html>\n"
    )


def run_header(run, title: str) -> str:
    """The header of a command's page: the command, the script, the versions."""
    return (f"<header><h1>jax-shard-lint {e(title)}</h1><p>{e(run.script or '')} &middot; jax {e(run.jax_version)} "
            f"&middot; jax-shard-lint {e(run.tool_version)}</p></header>")
