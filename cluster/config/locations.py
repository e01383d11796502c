"""Strings of a spec that leave it as a path, a URI, an argv word or an environment value: what each may hold.

Such a string is refused at validate when it could not be used as given: a NUL byte (the OS cuts the string there
or refuses it), a line break or another control character (one argv word or env value printed as two lines; a
path no shell or editor shows as written), or, where a location is expected, a URI scheme this tool cannot open
(a mistyped `s4://` or `s3:/bucket` would otherwise become a local directory of that name).
"""

from __future__ import annotations

import re

DATASET_SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")
"""URI schemes a dataset root may use: the filesystems pyarrow's FileSystem.from_uri opens (cluster/dataset/store.py)."""
MODEL_SCHEMES = ("sim",)
"""URI schemes a model path may use: sim://NAME, the simulated engine's checkpoint name (nothing is loaded)."""

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(//)?")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
_NAMES = {"\x00": "a NUL byte", "\n": "a newline", "\r": "a carriage return", "\t": "a tab",
          "\x85": "a NEL line break", "\u2028": "a U+2028 line separator", "\u2029": "a U+2029 paragraph separator"}


def control_character(value: str) -> str | None:
    """What the first control character or line break of `value` is (None when it has none)."""
    m = _CONTROL_RE.search(value)
    if m is None:
        return None
    ch = m.group(0)
    return f"{_NAMES.get(ch, f'the control character U+{ord(ch):04X}')} at character {m.start()}"


def check_word(value: str, what: str = "value", *, quote: bool = True) -> str:
    """A string that becomes one argv word, env value or path: one line, no NUL and no control characters
    (`quote=False`: the message does not show the value, e.g. a secret's)."""
    found = control_character(value)
    if found is not None:
        shown = f" {value[:40]!r}" if quote else " (not shown: a secret)"
        raise ValueError(f"{what}{shown} contains {found}: it becomes one argv word, environment value or "
                         "path, which must be a single line without control characters")
    return value


def _scheme(value: str) -> tuple[str, bool] | None:
    m = _SCHEME_RE.match(value)
    if m is None or len(m.group(1)) == 1:  # a one-letter "scheme" is a drive letter, not a URI
        return None
    return m.group(1), m.group(2) is not None


def check_location(value: str, what: str, schemes: tuple[str, ...] = ()) -> str:
    """A local path, or a `scheme://` URI with one of `schemes`; `scheme:` without `//` and unknown schemes are
    refused (they would be read as a local path named after the URI)."""
    check_word(value, what)
    found = _scheme(value)
    if found is None:
        return value
    scheme, slashes = found
    allowed = ", ".join(f"{s}://" for s in schemes) if schemes else "none (a local path is expected)"
    if scheme not in schemes and scheme.lower() in schemes:
        raise ValueError(f"{what} {value!r}: write the URI scheme in lowercase ({scheme.lower()}://...); pyarrow "
                         "does not recognise it otherwise")
    if scheme not in schemes:
        raise ValueError(f"{what} {value!r} has the URI scheme {scheme!r}, which cannot be opened here; "
                         f"expected a local path or one of: {allowed}")
    if not slashes:
        raise ValueError(f"{what} {value!r}: a URI is written {scheme}://..., not {scheme}:...")
    return value


def check_local_path(value: str, what: str) -> str:
    """A local file or directory path (relative or absolute), no URI."""
    return check_location(value, what)


_RAY_ADDRESS_RE = re.compile(r"^(?:auto|(?:ray://)?(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5})$")


def check_ray_address(value: str, what: str) -> str:
    """A Ray cluster address as given (`auto`, `host:port` or `ray://host:port`, port 1-65535); ValueError naming
    `what` otherwise. Ray's own parser raises a bare RuntimeError or ValueError on anything else (`bogus://x`,
    `x:y`), and `local` would start a new cluster instead of joining the one meant."""
    port = value.rsplit(":", 1)[-1]
    if not _RAY_ADDRESS_RE.fullmatch(value) or (value != "auto" and not 1 <= int(port) <= 65535):
        raise ValueError(f"{what} {value!r} is not a Ray cluster address; expected auto, host:port or "
                         "ray://host:port (port 1-65535)")
    return value
