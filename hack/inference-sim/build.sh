#!/usr/bin/env bash
# Builds llm-d-inference-sim, an independent vLLM emulator in Go that serves
# the OpenAI API and publishes vLLM-format KV events over ZMQ. The endpoint
# picker's standalone-mode tests run one per worker pod.
#
# The Go module proxy serves the pinned version but refuses `go install` for
# it, so the module is downloaded and built inside the module cache folder
# `go mod download` names. The binary lands in a cache folder outside the
# clone,
#   ${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/inference-sim/<version>
# and is built only when missing (about 9 minutes on two busy cores the
# first time; later runs find it and skip the build).
#
#   hack/inference-sim/build.sh        build when missing, then print the binary's path
#   hack/inference-sim/build.sh --path print the binary's path without building
set -euo pipefail

module="github.com/llm-d/llm-d-inference-sim"
version="v0.10.2"

dir="${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/inference-sim/$version"
bin="$dir/llm-d-inference-sim"
if [ "${1:-}" = "--path" ]; then
	echo "$bin"
	exit 0
fi
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi

src="$(go mod download -json "$module@$version" | awk -F'"' '($2 == "Dir") { print $4; exit }')"
if [ -z "$src" ] || [ ! -d "$src" ]; then
	echo "inference-sim: go mod download did not name a folder for $module@$version" >&2
	exit 1
fi

# Build beside the final path and rename into place, so an interrupted
# build never leaves a binary that looks complete.
mkdir -p "$dir"
scratch="$(mktemp "$bin.partial.XXXXXX")"
trap 'rm -f "$scratch"' EXIT
echo "inference-sim: building $version into $dir" >&2
(cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 19 go build -trimpath -o "$scratch" ./cmd/llm-d-inference-sim)
chmod 755 "$scratch"
mv "$scratch" "$bin"
trap - EXIT
echo "$bin"
