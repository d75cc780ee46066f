#!/usr/bin/env bash
# `make test`'s order of work (the Makefile passes BIN, WORKERS, QUICK, HUB_STAMP and BUILDS_LOG).
#
# What the slow tier needs is made from the start, in the background (tests/llamacpp_builds.py:
# llama-server and the older llama.cpp generations, a few minutes of compiling on 2 cores), while
# the venvs get their extras and the quick tier runs; a slow-tier test whose build
# is still under way waits for it (the build cache's lock) rather than building it again. The slow
# tier runs in SLOW_WORKERS processes (whole files each, the longest first: tests/conftest.py), and
# `make test-hub` beside it (no slow-tier test times anything: they check counters and outputs). If
# the builds fail, make test fails with one line naming their log, whatever the tests did. It ends
# with each part's time.
set -u
: "${BIN:?}" "${WORKERS:?}" "${QUICK:?}" "${HUB_STAMP:?}" "${BUILDS_LOG:?}"
SLOW_WORKERS=${SLOW_WORKERS:-2}
HUB_LOG=${HUB_LOG:-$(dirname "$BUILDS_LOG")/test-hub.log}

# At a lower priority: the compiler takes the cores the tests leave idle (they mostly wait on child
# processes, and the slow tier's programs run on one thread), and the tests' timings stay theirs.
nice -n 10 "$BIN/python" tests/llamacpp_builds.py >"$BUILDS_LOG" 2>&1 &
builds=$!
echo "make test: building llama-server and the older llama.cpp generations in the background (log: $BUILDS_LOG)"

# The main venv's extras first (they change its huggingface_hub: no test may run in it meanwhile),
# then the hub tests' own venv in the background while the quick tier runs (it finds the wheels
# the first install downloaded in pip's cache).
start=$SECONDS
make --no-print-directory setup-convert
status=$?
extras=$((SECONDS - start))
quick=0 slow=0 hub_status=1
if [ "$status" -eq 0 ]; then
    make --no-print-directory "$HUB_STAMP" >"$HUB_LOG" 2>&1 &
    hub_setup=$!
    start=$SECONDS
    "$BIN/python" -m pytest -q -n "$WORKERS" -m "$QUICK"
    status=$?
    quick=$((SECONDS - start))
    wait "$hub_setup"
    hub_status=$?
fi
if [ "$status" -eq 0 ]; then
    # The hub tests (their own venv) beside the slow tier, which waits on its programs at times;
    # their output is shown when both have ended.
    if [ "$hub_status" -eq 0 ]; then
        make --no-print-directory test-hub >>"$HUB_LOG" 2>&1 &
        hub=$!
    fi
    start=$SECONDS
    "$BIN/python" -m pytest -q -n "$SLOW_WORKERS" --dist loadfile --no-loadscope-reorder -m "not ($QUICK)" --durations=10
    status=$?
    slow=$((SECONDS - start))
    [ "$hub_status" -eq 0 ] && { wait "$hub"; hub_status=$?; }
    cat "$HUB_LOG"
    [ "$status" -eq 0 ] && status=$hub_status
fi
echo "make test: the extras installed in ${extras} s, the quick tier in ${quick} s, the slow tier in ${slow} s (the hub tests beside it)"

if wait "$builds"; then
    # How long the builds took: minutes on a first run, 0 s where the cache had them.
    echo "make test: the background llama.cpp builds, $(tail -n 1 "$BUILDS_LOG") (log: $BUILDS_LOG)"
else
    echo "make test: FAILED: the background llama.cpp builds: $(tail -n 1 "$BUILDS_LOG") (log: $BUILDS_LOG)" >&2
    status=1
fi
exit "$status"
