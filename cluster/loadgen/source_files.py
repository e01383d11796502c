"""Reading a prompt source's file: its UTF-8 text, or an error of the source's own kind naming the file."""

from __future__ import annotations

import pathlib

from cluster.errors import PromptSourceError


def read_source_text(path: pathlib.Path, error: type[PromptSourceError], what: str) -> str:
    """The file's text; a missing or unreadable file raises `error` ('<path>: <what> not found', or why it cannot be
    read)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: {what} not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{path}: cannot read the {what}: {e}", file=str(path)) from None
