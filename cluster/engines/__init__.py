"""Engine adapters (SGLang, vLLM, the simulator): flags and wire formats live only here; reach one through
`cluster.engines.registry.get_engine(name)`."""
