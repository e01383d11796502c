"""Command modules of the `sglbench` CLI; each exposes register(app)."""
