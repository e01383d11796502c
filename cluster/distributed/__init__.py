"""Ray-side of sglbench: the driver, actors and placement (the only package that imports ray)."""
