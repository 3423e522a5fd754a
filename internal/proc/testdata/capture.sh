#!/usr/bin/env bash
# capture.sh DEST PID... copies the /proc files the reader uses for each PID
# (and each of its threads) into DEST/PID/..., as regular files, so tests can
# point a Reader's Root at DEST. Descriptor directories become directories of
# empty files named like the descriptors. Run it as root on a real host to
# refresh testdata/proc; then update the expectations in reader_test.go.
set -euo pipefail
dest=$1; shift
mkdir -p "$dest"
cp /proc/loadavg "$dest/loadavg"
for pid in "$@"; do
  d=$dest/$pid
  mkdir -p "$d/task" "$d/fd"
  for f in stat status schedstat io limits cmdline; do
    cat "/proc/$pid/$f" > "$d/$f" 2>/dev/null || true
  done
  for fd in /proc/$pid/fd/*; do [ -e "$fd" ] || [ -L "$fd" ] && : > "$d/fd/$(basename "$fd")"; done
  for t in /proc/$pid/task/*; do
    tid=$(basename "$t")
    mkdir -p "$d/task/$tid"
    for f in stat status schedstat; do cat "$t/$f" > "$d/task/$tid/$f" 2>/dev/null || true; done
  done
done
