#!/usr/bin/env bash
# exported_symbols.sh: libsparsejit.so exports exactly the functions sparsejit.h declares with
# SJ_API (the library is compiled with hidden visibility), and every sj_ function the header
# declares carries SJ_API, so neither an internal symbol nor a forgotten public one slips through.
set -eu
lib="$1" header="$2"
fail() { echo "FAIL: $*"; exit 1; }
unmarked=$(grep -E '^[a-z].*[ *]sj_[a-z0-9_]+\(' "$header" | grep -v '^SJ_API ' || true)
[ -z "$unmarked" ] || fail "public functions in $header without SJ_API (they would be hidden):
$unmarked"
declared=$(sed -n 's/^SJ_API .*[ *]\(sj_[a-z0-9_]*\)(.*/\1/p' "$header" | sort)
exported=$(nm -D --defined-only "$lib" | awk '{ print $NF }' | sort)
[ -n "$declared" ] || fail "found no SJ_API declarations in $header"
extra=$(comm -13 <(echo "$declared") <(echo "$exported"))
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
[ -z "$extra" ] || fail "$lib exports symbols that sparsejit.h does not declare:
$extra"
[ -z "$missing" ] || fail "$lib does not export functions that sparsejit.h declares:
$missing"
echo "exported symbols: ok ($(echo "$exported" | wc -l) sj_ functions)"
