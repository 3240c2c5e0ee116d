"""Integration tests: the product against real parts (nats-server, vcsim, the Kubernetes double)."""
