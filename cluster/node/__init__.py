"""The serving node's readiness: the facts `sglbench doctor` reads (facts.py, collect.py) and the pure checks over them."""
