"""The NATS bus: the connection, the streams and buckets (layout), the topology KV and its watch,
publishing (the outbox, sampled events), reading the events stream back (replay), and dead
letters."""
