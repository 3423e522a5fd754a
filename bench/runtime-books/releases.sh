#!/usr/bin/env bash
# Runs gomem's agreement test on every Go release the layout tables cover
# (the suite builds only the oldest and the newest): the census patient
# built stripped with each toolchain (fetched through the module proxy),
# read from memory and compared with its own goroutine dump, heap profile
# and runtime/metrics. About a minute per release.
set -euo pipefail
cd "$(dirname "$0")/../.."
GOMEM_RELEASES=all go test -count=1 -v -timeout 60m -run '^TestReleases$' ./internal/gomem | grep -E '^(=== RUN|\s*--- (PASS|FAIL)|\s+releases_linux_test|ok|FAIL)'
