"""The simulated SGLang 0.5.23 server, its own package (like guidellm's mock server): `python -m cluster.sim.server`."""
