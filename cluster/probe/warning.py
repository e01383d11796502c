"""The probe's typed warning: what it found doubtful in a checkpoint, with a stable code and whether it touches MTP."""

from __future__ import annotations

from dataclasses import dataclass

from cluster.input_files import JsonValue


@dataclass(frozen=True)
class ProbeWarning:
    """One doubtful fact of a checkpoint; readers branch on `code`, people read `message` (one line)."""

    code: str
    """Stable kebab-case name of the kind of doubt, e.g. `mtp-undeclared`, `mtp-layer-count`, `mtp-keys-disagree`."""
    message: str
    about_mtp: bool = False
    """The built-in MTP/NextN head cannot be trusted as probed: `init` writes no NEXTN variant while this stands."""

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, JsonValue]:
        return {"code": self.code, "message": self.message, "about_mtp": self.about_mtp}
