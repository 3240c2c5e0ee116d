#!/usr/bin/env bash
# Builds our vcsim (tools/vcsim/main.go) from Debian's govmomi source. Installs the Debian packages
# it needs when they are missing. Output: build/vcsim. Skips the build when the binary is newer
# than main.go and this script.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/vcsim
if [ -x "$out" ] && [ "$out" -nt tools/vcsim/main.go ] && [ "$out" -nt scripts/build-vcsim.sh ]; then
  exit 0
fi
need=()
command -v go >/dev/null || need+=(golang-go)
[ -d /usr/share/gocode/src/github.com/vmware/govmomi/simulator ] || need+=(golang-github-vmware-govmomi-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "build-vcsim: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
mkdir -p build/gopath/src/hostaffinity-vcsim
cp tools/vcsim/main.go build/gopath/src/hostaffinity-vcsim/main.go
# -trimpath: the same binary from any checkout. Build to a temporary name and rename, so a
# concurrent run never executes a half-written binary.
GOPATH="$PWD/build/gopath:/usr/share/gocode" GO111MODULE=off GOFLAGS=-mod=mod \
  go build -trimpath -o "$out.tmp.$$" ./build/gopath/src/hostaffinity-vcsim
mv -f "$out.tmp.$$" "$out"
echo "build-vcsim: built $out"
