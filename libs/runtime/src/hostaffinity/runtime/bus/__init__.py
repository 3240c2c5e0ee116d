"""The NATS bus: the connection, the streams and buckets (layout), the topology KV and its watch,
publishing (the outbox, sampled events), reading the events stream back (replay), the durable
consumers provisioning makes, and dead letters."""
