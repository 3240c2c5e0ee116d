"""What a service serves over HTTP besides its own endpoints: /healthz, /readyz and /metrics, the
counting of refused requests, and serving certificates."""
