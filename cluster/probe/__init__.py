"""Checkpoint probe: config, safetensors index and headers, quantization metadata, MTP/NextN layouts."""
