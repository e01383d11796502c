"""The sglbench release (`cluster.__version__`) and the SGLang release it was checked against: leaf constants, so
the package face, the engine adapter and the simulator share one definition of each."""

__version__ = "0.1.0"

SGLANG_RELEASE = "0.5.23"
"""The SGLang release whose flags, wire format and launch rules this tool was checked against: the engine adapter's
default when the installed version cannot be read, and the version the simulated server reports."""
