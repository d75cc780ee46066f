#!/usr/bin/env bash
# `make test`'s order of work (the Makefile passes BIN, WORKERS, QUICK, HUB_STAMP and BUILDS_LOG).
#
# What the slow tier needs is made from the start, in the background (tests/llamacpp_builds.py:
# llama-server and the older llama.cpp generations, a few minutes of compiling on 2 cores), while
# the venvs get their extras (both at once) and the quick tier runs; a slow-tier test whose build
# is still under way waits for it (the build cache's lock) rather than building it again. The slow
# tier runs in SLOW_WORKERS processes (whole files each, the longest first: tests/conftest.py), and
# `make test-hub` beside it (no slow-tier test times anything: they check counters and outputs). If
# the builds fail, make test fails with one line naming their log, whatever the tests did.
set -u
: "${BIN:?}" "${WORKERS:?}" "${QUICK:?}" "${HUB_STAMP:?}" "${BUILDS_LOG:?}"
SLOW_WORKERS=${SLOW_WORKERS:-2}
HUB_LOG=${HUB_LOG:-$(dirname "$BUILDS_LOG")/test-hub.log}

# At a lower priority: the compiler takes the cores the tests leave idle (they mostly wait on child
# processes, and the slow tier's programs run on one thread), and the tests' timings stay theirs.
nice -n 10 "$BIN/python" tests/llamacpp_builds.py >"$BUILDS_LOG" 2>&1 &
builds=$!
echo "make test: building llama-server and the older llama.cpp generations in the background (log: $BUILDS_LOG)"

make --no-print-directory -j2 setup-convert "$HUB_STAMP" \
    && "$BIN/python" -m pytest -q -n "$WORKERS" -m "$QUICK"
status=$?
if [ "$status" -eq 0 ]; then
    # The hub tests (their own venv) beside the slow tier: its two processes leave a core idle at
    # times; their output is shown when both have ended.
    make --no-print-directory test-hub >"$HUB_LOG" 2>&1 &
    hub=$!
    "$BIN/python" -m pytest -q -n "$SLOW_WORKERS" --dist loadfile --no-loadscope-reorder -m "not ($QUICK)" --durations=10
    status=$?
    wait "$hub"
    hub_status=$?
    cat "$HUB_LOG"
    [ "$status" -eq 0 ] && status=$hub_status
fi

if wait "$builds"; then
    # How long the builds took: minutes on a first run, 0 s where the cache had them.
    echo "make test: the background llama.cpp builds, $(tail -n 1 "$BUILDS_LOG") (log: $BUILDS_LOG)"
else
    echo "make test: FAILED: the background llama.cpp builds: $(tail -n 1 "$BUILDS_LOG") (log: $BUILDS_LOG)" >&2
    status=1
fi
exit "$status"
