#!/usr/bin/env bash
# Builds grpcurl, the independent gRPC client some endpoint-picker tests run
# (reflection, health and one ext_proc exchange driven from JSON), compiled
# from the Go module proxy at the version hack/grpcurl/go.mod pins.
#
# The binary lands in a cache folder outside the clone,
#   ${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/grpcurl/<grpcurl version>
# and is built only when missing (a few minutes on two busy cores; later
# runs find it and skip the build).
#
#   hack/grpcurl/build.sh        build when missing, then print the binary's path
#   hack/grpcurl/build.sh --path print the binary's path without building
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"

version="$(awk '($1 == "github.com/fullstorydev/grpcurl") { print $2; exit }' "$here/go.mod")"
if [ -z "$version" ]; then
	echo "grpcurl: cannot read the pinned version from hack/grpcurl/go.mod" >&2
	exit 1
fi

dir="${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/grpcurl/$version"
bin="$dir/grpcurl"
if [ "${1:-}" = "--path" ]; then
	echo "$bin"
	exit 0
fi
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi

# Build beside the final path and rename into place, so an interrupted
# build never leaves a binary that looks complete.
mkdir -p "$dir"
scratch="$(mktemp "$bin.partial.XXXXXX")"
trap 'rm -f "$scratch"' EXIT
echo "grpcurl: building $version into $dir" >&2
(cd "$here" && nice -n 19 go build -trimpath -ldflags "-X main.version=$version" -o "$scratch" github.com/fullstorydev/grpcurl/cmd/grpcurl)
chmod 755 "$scratch"
mv "$scratch" "$bin"
trap - EXIT
echo "$bin"
