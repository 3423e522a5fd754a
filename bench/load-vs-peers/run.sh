#!/bin/sh
# Compares gosleuth load with wrk, vegeta and hey (about 13 minutes with the
# defaults: 30 s per run, 3 rounds, 10 runs per round). Flags are passed on,
# e.g. ./run.sh -duration 10s -rounds 3
# Needs 2 CPUs, taskset, wrk and hey (apt-get install wrk hey) and the Go
# module proxy for vegeta, which is built into a temporary directory.
set -eu
cd "$(dirname "$0")"
exec go run . "$@"
