#!/usr/bin/env bash
# context_scope.sh: every public function that takes an sj_context starts with RT_USE_CONTEXT(ctx)
# (sj_context_create with RT_USE_CONTEXT(NULL)), so it runs on ctx's context and the caller's
# current CUDA context is what it finds after the call (runtime/runtime.h); and every such function sparsejit.h declares has a definition this check
# saw, so one written in another form cannot slip past. Usage: context_scope.sh SOURCE_DIR
set -eu
src="$1"
fail() { echo "FAIL: $*"; exit 1; }
declared=$(tr '\n' ' ' <"$src/include/sparsejit.h" | grep -oE 'SJ_API sj_status sj_[a-z0-9_]+\((sj_context \*|const sj_context_options \*)' |
  sed -E 's/.* (sj_[a-z0-9_]+)\(.*/\1/' | sort -u)
[ -n "$declared" ] || fail "found no public function taking an sj_context in sparsejit.h"
# name of each definition, then whether the first line of its body keeps the caller's context
checked=$(cd "$src" && awk '
  /^sj_status sj_[a-z0-9_]+\((sj_context \*|const sj_context_options \*)/ { name = $2; sub(/\(.*/, "", name); want = 1; next }
  want && /^\{/ { getline body; print name, (body ~ /^    RT_USE_CONTEXT\((ctx|NULL)\);/ ? "ok" : FILENAME ":" FNR); want = 0 }
' runtime/*.c tuner/*.c ops/*/*.c | sort -u)
bad=$(echo "$checked" | awk '$2 != "ok"')
[ -z "$bad" ] || fail "public functions whose body does not start with RT_USE_CONTEXT(ctx):
$bad"
unseen=$(comm -23 <(echo "$declared") <(echo "$checked" | awk '{ print $1 }' | sort -u))
[ -z "$unseen" ] || fail "declared in sparsejit.h, taking an sj_context, but no definition of the checked form found:
$unseen"
echo "context scope: ok ($(echo "$declared" | wc -l) functions)"
