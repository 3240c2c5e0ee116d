#!/usr/bin/env bash
# Installs the command-line tools the documented install steps use, which the docs-as-tests run
# as written (tests/test_docs_install.py): curl and unzip (vCenter's certificate bundle) and
# openssl (a thumbprint). Installs only what is missing, from Debian's packages.
set -euo pipefail
need=()
command -v curl >/dev/null || need+=(curl)
command -v unzip >/dev/null || need+=(unzip)
command -v openssl >/dev/null || need+=(openssl)
if [ ${#need[@]} -gt 0 ]; then
  echo "install-tools: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
