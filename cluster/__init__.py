"""sglbench: a Ray-distributed benchmarking cluster for SGLang server variants."""

__version__ = "0.1.0"
