#!/usr/bin/env bash
# `make test-loaded`: the whole suite (`make test`) while another process keeps one core busy, as
# another user's work or a CI neighbour would. No test may depend on the machine being idle: they
# check counters, formulas, outputs and the kinds of answer, never a timing (docs/development.md).
#
# The busy loop is a child of this script, at normal priority, bounded three ways: it ends with
# the suite (killed by its pid on exit), when this script is gone (it watches its parent), and
# after LOAD_LIMIT_S seconds whatever happens.
set -u
: "${MAKE:=make}"
LOAD_LIMIT_S=${LOAD_LIMIT_S:-5400}
PYTHON=${PYTHON:-python3}

"$PYTHON" - "$LOAD_LIMIT_S" <<'PY' &
import os, sys, time
parent, end = os.getppid(), time.monotonic() + float(sys.argv[1])
while time.monotonic() < end and os.getppid() == parent:
    for _ in range(200_000):  # a core's worth of work between checks
        pass
PY
busy=$!
export LOAD_PID=$busy
trap 'kill "$busy" 2>/dev/null; wait "$busy" 2>/dev/null' EXIT
echo "make test-loaded: one core kept busy by pid $busy while make test runs (at most ${LOAD_LIMIT_S} s)"

start=$(date +%s)
"$MAKE" --no-print-directory test
status=$?
elapsed=$(( $(date +%s) - start ))
printf 'make test-loaded: make test with one core busy: exit %s in %d min %02d s\n' "$status" $((elapsed / 60)) $((elapsed % 60))
exit "$status"
