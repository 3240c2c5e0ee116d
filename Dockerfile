# One image per service, from the repository root:
#   docker build --build-arg SERVICE=node-labeller -t hostaffinity/node-labeller .
# SERVICE is the service's folder under services/ (node-labeller, drs-translator,
# admission-webhook, scheduler-extender, descheduler; its console script is hostaffinity-$SERVICE).
# Every image also carries the hostaffinity CLI (compose's vcsim-seed runs seed-vcsim from the
# node-labeller image; `hostaffinity events` helps in any container).
FROM python:3.11-slim AS build
ARG SERVICE
RUN pip install --no-cache-dir uv==0.13.9
# Built where it runs: the console scripts' shebangs name the virtualenv's absolute path.
WORKDIR /app
COPY pyproject.toml uv.lock ./
COPY libs libs
COPY services services
RUN : "${SERVICE:?build with --build-arg SERVICE=<folder under services/>}" \
    && uv sync --frozen --no-dev --no-editable \
        --package "hostaffinity-$SERVICE" --package hostaffinity-cli \
    && ln -s "hostaffinity-$SERVICE" .venv/bin/hostaffinity-service

FROM python:3.11-slim
COPY --from=build /app/.venv /app/.venv
ENV PATH=/app/.venv/bin:$PATH
USER 65532:65532
# Health and metrics; a service's own ports (the extender's 8888, the webhook's 8443) are
# declared where they are published: compose.yaml and the Deployments.
EXPOSE 8080
# Exec form: the service is PID 1 and gets SIGTERM itself (the runner drains on it). No default
# arguments: the Deployments pass their --config files, compose configures through the environment.
ENTRYPOINT ["hostaffinity-service"]
