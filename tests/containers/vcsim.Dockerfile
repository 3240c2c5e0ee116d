# Test-only stand-in for the public vmware/vcsim image, which CI cannot pull: our build of
# govmomi's simulator (tools/vcsim/main.go → build/vcsim). Its flags differ from the public
# image's (-listen, -clusters, -hosts, -vms, -login): the compose override says how.
# Built by scripts/images.sh from build/images/vcsim.
ARG BASE
FROM ${BASE}
COPY vcsim /usr/local/bin/vcsim
RUN chmod 0755 /usr/local/bin/vcsim
EXPOSE 8989
ENTRYPOINT ["vcsim"]
