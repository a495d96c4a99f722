"""Collectors run beside the engine on fixed deadlines: server metrics, GPUs, the client."""
