#!/usr/bin/env bash
# build-image.sh [TAG]: builds the gosleuth image from this checkout with
# podman (or docker: CONTAINER_TOOL=docker). The binary is built here, static
# (CGO_ENABLED=0), stripped and without local paths, then copied into a
# FROM scratch image (deploy/Containerfile). Nothing is pulled from a
# registry. TAG defaults to localhost/gosleuth:<git describe>.
set -euo pipefail
cd "$(dirname "$0")/.."
tool=${CONTAINER_TOOL:-podman}
version=$(git describe --always --dirty 2>/dev/null || echo dev)
tag=${1:-localhost/gosleuth:$version}
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/gosleuth" ./cmd/gosleuth
cp deploy/Containerfile "$ctx/Containerfile"
"$tool" build --quiet -f "$ctx/Containerfile" -t "$tag" "$ctx" >/dev/null
size=$("$tool" image inspect --format '{{.Size}}' "$tag")
echo "$tag ($((size / 1000000)) MB)"
