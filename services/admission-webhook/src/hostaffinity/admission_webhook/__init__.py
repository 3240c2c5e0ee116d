"""admission-webhook: gives opted-in pods native ESXi-host twins of their hostname terms."""
