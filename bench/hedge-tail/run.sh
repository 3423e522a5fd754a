#!/bin/sh
# Runs the hedge-tail benchmark (about two and a half minutes with the
# defaults). Flags are passed on, e.g. ./run.sh -duration 5s -scenario tail
set -eu
cd "$(dirname "$0")"
exec go run . "$@"
