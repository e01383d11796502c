"""GPU telemetry during measured windows: the readings, the sampling loop and its samplers (NVML; the simulator's device)."""
