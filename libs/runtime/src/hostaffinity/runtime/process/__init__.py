"""The process around the work: typed config loading, telemetry, cancellation, a keyed work
queue; the lowest layer of the runtime, imported by the others."""
