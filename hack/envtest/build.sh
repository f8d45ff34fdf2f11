#!/usr/bin/env bash
# Builds the control plane that the Kubernetes discovery tests run against
# (sigs.k8s.io/controller-runtime/pkg/envtest): a real kube-apiserver and a
# real etcd, compiled from the Go module proxy. Prebuilt envtest downloads are
# not used, so the API server is the one these modules pin.
#
# The binaries land in a cache folder outside the clone,
#   ${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/envtest/<kubernetes version>
# and are built only when missing: the first build takes about 10 minutes on
# two cores, a warm machine skips it. The build runs under `nice -n 19`
# because it is long and the tests it serves can wait for it.
#
#   hack/envtest/build.sh        build when missing, then print the folder
#   hack/envtest/build.sh --dir  print the folder without building
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

# module_version FILE MODULE prints the version FILE requires of MODULE.
module_version() {
	awk -v m="$2" '($1 == m || ($1 == "require" && $2 == m)) { print ($1 == m ? $2 : $3); exit }' "$1"
}

k8s_version="$(module_version "$here/go.mod" k8s.io/kubernetes)"
etcd_version="$(module_version "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)"
project_etcd="$(module_version "$root/go.mod" go.etcd.io/etcd/server/v3)"
if [ -z "$k8s_version" ] || [ -z "$etcd_version" ]; then
	echo "envtest: cannot read the pinned versions from hack/envtest" >&2
	exit 1
fi
if [ "$etcd_version" != "$project_etcd" ]; then
	echo "envtest: hack/envtest/etcd pins etcd $etcd_version, the project uses $project_etcd" >&2
	exit 1
fi

assets="${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/envtest/$k8s_version"
if [ "${1:-}" = "--dir" ]; then
	echo "$assets"
	exit 0
fi

if [ -x "$assets/kube-apiserver" ] && [ -x "$assets/etcd" ]; then
	echo "$assets"
	exit 0
fi

# Build into a scratch folder beside the final one and rename it into place,
# so an interrupted build never leaves a folder that looks complete.
mkdir -p "$(dirname "$assets")"
scratch="$(mktemp -d "$assets.partial.XXXXXX")"
chmod 755 "$scratch"
trap 'rm -rf "$scratch"' EXIT

minor="${k8s_version#v1.}"
minor="${minor%%.*}"
ldflags="-X k8s.io/component-base/version.gitVersion=$k8s_version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"

echo "envtest: building kube-apiserver $k8s_version and etcd $etcd_version into $assets (the first build takes about 10 minutes)" >&2
(cd "$here" && nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$scratch/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
(cd "$here/etcd" && nice -n 19 go build -trimpath -o "$scratch/etcd" go.etcd.io/etcd/server/v3)

rm -rf "$assets"
mv "$scratch" "$assets"
trap - EXIT
echo "$assets"
