"""Integration tests: real agents, ssh stand-ins, a real Prometheus, PyTorch programs, py-spy on real processes."""
