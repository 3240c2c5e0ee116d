"""Kubernetes: the API client, informers (list, watch, re-list on 410), Lease election, Events."""
