"""Experiment spec: typed, frozen models of an experiment YAML and its loader."""
