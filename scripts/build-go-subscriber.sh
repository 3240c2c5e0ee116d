#!/usr/bin/env bash
# Builds the Go example subscriber (examples/go-subscriber/main.go) with Debian's nats.go source,
# as build-vcsim.sh builds vcsim; installs the Debian packages it needs when they are missing.
# Output: build/go-subscriber. Skips the build when the binary is newer than main.go and this
# script.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/go-subscriber
source=examples/go-subscriber/main.go
if [ -x "$out" ] && [ "$out" -nt "$source" ] && [ "$out" -nt scripts/build-go-subscriber.sh ]; then
  exit 0
fi
need=()
command -v go >/dev/null || need+=(golang-go)
[ -d /usr/share/gocode/src/github.com/nats-io/nats.go ] || need+=(golang-github-nats-io-go-nats-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "build-go-subscriber: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
mkdir -p build/gopath/src/hostaffinity-go-subscriber
cp "$source" build/gopath/src/hostaffinity-go-subscriber/main.go
GOPATH="$PWD/build/gopath:/usr/share/gocode" GO111MODULE=off GOFLAGS=-mod=mod \
  go build -trimpath -o "$out.tmp.$$" ./build/gopath/src/hostaffinity-go-subscriber
mv -f "$out.tmp.$$" "$out"
echo "build-go-subscriber: built $out"
