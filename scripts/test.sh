#!/usr/bin/env bash
# The test suite (make test), with the failures repeated at the end: a CI
# log that keeps only its tail then still names what failed, even after a
# goroutine dump of thousands of lines.
set -uo pipefail
GO=${GO:-go}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if "$GO" test -race -count=1 -timeout 30m "$@" 2>&1 | tee "$log"; then
	exit 0
fi
echo
echo "=== make test failed; what failed, repeated from above:"
awk '
	/^=== testwatch: the test.s goroutine/ { inSummary = 1 }
	inSummary { print; if (/^=== testwatch: .* hung:/) inSummary = 0; next }
	/^--- FAIL|^FAIL|^panic: |^\tpanic: / { print; next }
	/^\trunning tests:/ { running = 1; print; next }
	running && /^\t\t/ { print; next }
	{ running = 0 }
	/_test\.go:[0-9]+: / && n < 40 { print; n++ }
' "$log" | head -80
exit 1
