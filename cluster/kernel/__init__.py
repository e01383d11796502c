"""The kernel: the run's vocabulary and the dataset's records, at the bottom of the package (imports only errors and config)."""
