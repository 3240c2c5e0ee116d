"""The `hostaffinity` command line: operator and demo helpers around the services."""
