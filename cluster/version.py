"""The sglbench release (`cluster.__version__`; a leaf module so the package face and its submodules share it)."""

__version__ = "0.1.0"
