"""The test platform: real nats-server, our vcsim, and the Kubernetes API test double."""
