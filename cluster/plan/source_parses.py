"""Each prompt, trace or tokenizer file parsed once per validation, whatever the number of variants or workloads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Hashable, TypeVar, cast

T = TypeVar("T")


def file_identity(path: Path) -> tuple[Hashable, ...]:
    """The path as named plus what says the file's content is the same: device, inode, size and modification time
    (ns). A path that cannot be stat'ed is its name alone (its parse then fails, and a failure is never kept)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return (str(path),)
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class SourceParses:
    """The parses of one validation (plan/inputs.py check_prompts): each kept under what was parsed, the file's
    identity and whatever else the parse reads, so every variant's and workload's checks reuse it. A file rewritten
    in between (another size, inode or mtime) is parsed again; an error is raised, not kept."""

    def __init__(self) -> None:
        self._done: dict[tuple[Hashable, ...], object] = {}
        self.parses = 0
        """Parses run (not answered from what was kept)."""

    def get(self, kind: str, path: Path, parse: Callable[[], T], *extra: Hashable) -> T:
        key = (kind, *file_identity(path), *extra)
        if key not in self._done:
            self._done[key] = parse()
            self.parses += 1
        return cast(T, self._done[key])


__all__ = ["SourceParses", "file_identity"]
