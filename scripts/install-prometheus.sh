#!/usr/bin/env bash
# Installs Debian's `prometheus` package (prometheus and promtool) when promtool is missing: the
# alert rule tests and the end-to-end scrape test run them. The package starts its service on
# install on a normal system; a temporary policy-rc.d (exit 101: "action forbidden") stops that,
# so the install is the same with or without systemd (CI is root without it).
set -euo pipefail
if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
  exit 0
fi
echo "install-prometheus: installing prometheus ($(apt-cache policy prometheus | awk '/Candidate/ {print $2}'))"
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
own_policy=false
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod +x "$policy"
  own_policy=true
  trap 'rm -f "$policy"' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# A daemon the package may still have started (e.g. an existing policy allowed it) is left alone:
# the tests run their own on free loopback ports.
"$own_policy" && echo "install-prometheus: installed without starting its service"
command -v promtool >/dev/null
