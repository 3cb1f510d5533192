#!/usr/bin/env bash
# Tests of .ci/release and .ci/check-release on temporary clones of HEAD
# (run by make test): the dry run prints the commit and the five tags and
# changes nothing; bad versions, existing tags and a missing changelog
# section fail; a real release tags the commit whose nested modules require
# the version, which check-release accepts; check-release fails on a tagged
# commit whose nested modules require v0.0.0.
set -uo pipefail
root=$(git rev-parse --show-toplevel)
release=$root/.ci/release check=$root/.ci/check-release
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GIT_AUTHOR_NAME=test GIT_AUTHOR_EMAIL=test@localhost
export GIT_COMMITTER_NAME=test GIT_COMMITTER_EMAIL=test@localhost
passed=0 failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }

repo=$tmp/repo
git clone -q --shared "$root" "$repo"
git -C "$repo" checkout -q -B main "$(git -C "$root" rev-parse HEAD)"
cd "$repo"
head=$(git rev-parse HEAD)
want="v0.1.0 redis/v0.1.0 grpclimit/v0.1.0 prometheus/v0.1.0 otel/v0.1.0"

# The dry run.
if out=$("$release" v0.1.0 --dry-run 2>&1); then
	got=$(printf '%s\n' "$out" | sed -n -E 's/^([a-z/]*v0\.1\.0) -> [0-9a-f]{40}$/\1/p' | tr '\n' ' ')
	commits=$(printf '%s\n' "$out" | sed -n -E 's/^[a-z/]*v0\.1\.0 -> ([0-9a-f]{40})$/\1/p' | sort -u | wc -l)
	if [ "$got" = "$want " ] && [ "$commits" = 1 ]; then ok "dry run prints the five tags on one commit"
	else fail "dry run tags: got '$got' on $commits commits, want '$want'"; fi
	if printf '%s\n' "$out" | grep -q '^+	github.com/ratelimitkit/ratelimit v0.1.0$' &&
		printf '%s\n' "$out" | grep -q '^+require github.com/ratelimitkit/ratelimit v0.1.0$'; then
		ok "dry run shows the requires set to v0.1.0"
	else fail "dry run does not show the go.mod changes"; fi
else
	fail "dry run v0.1.0 failed: $out"
fi
if [ -z "$(git tag -l)" ] && [ "$(git rev-parse HEAD)" = "$head" ] && [ -z "$(git status --porcelain)" ]; then
	ok "dry run changes nothing"
else fail "dry run changed the repository"; fi

# Refusals.
for v in 0.1.0 v0.1 v01.0.0 v0.1.0.1; do
	if "$release" "$v" --dry-run >/dev/null 2>&1; then fail "VERSION $v accepted"; else ok "VERSION $v refused"; fi
done
if "$release" v9.8.7 --dry-run >/dev/null 2>&1; then fail "v9.8.7 without a CHANGELOG section accepted"
else ok "a version without a CHANGELOG section is refused"; fi
git tag otel/v0.1.0
if "$release" v0.1.0 --dry-run >/dev/null 2>&1; then fail "release over an existing tag accepted"
else ok "an existing tag is refused"; fi
git tag -d otel/v0.1.0 >/dev/null

# check-release on a tagged commit that requires v0.0.0.
git tag v0.0.9 "$head"
if out=$("$check" 2>&1); then fail "check-release passed on a tagged commit requiring v0.0.0"
elif printf '%s\n' "$out" | grep -q 'requires github.com/ratelimitkit/ratelimit v0.0.0'; then
	ok "check-release fails on a tagged commit requiring v0.0.0"
else fail "check-release failed without naming v0.0.0: $out"; fi
git tag -d v0.0.9 >/dev/null
if "$check" >/dev/null 2>&1; then ok "check-release passes on an untagged commit"
else fail "check-release failed on an untagged commit"; fi

# A real release in the clone, of a commit with one more exported function.
printf 'package ratelimit\n\n// ReleaseProbe is in v0.1.0 only.\nfunc ReleaseProbe() {}\n' >zz_release_probe.go
git add zz_release_probe.go && git commit -q -m "probe"
head=$(git rev-parse HEAD)
if out=$("$release" v0.1.0 2>&1); then
	n=0
	for t in $want; do
		[ "$(git rev-parse "$t^{commit}" 2>/dev/null)" = "$(git rev-parse HEAD)" ] && n=$((n + 1))
	done
	if [ "$n" = 5 ] && [ "$(git rev-parse HEAD^)" = "$head" ] && [ "$(git cat-file -t v0.1.0)" = tag ]; then
		ok "release creates one commit and the five annotated tags on it"
	else fail "release: $n of the five tags on HEAD"; fi
	if "$check" >/dev/null 2>&1; then ok "check-release passes at the release commit"
	else fail "check-release fails at the release commit"; fi
	if (cd redis && go list -m github.com/ratelimitkit/ratelimit | grep -q ' v0.1.0 => \.\./$'); then
		ok "the released redis module requires v0.1.0 and builds against ../"
	else fail "the released redis module does not resolve the core"; fi
else
	fail "release v0.1.0 failed: $out"
fi

# The API check against v0.1.0 (fetches apidiff on first use; about a
# minute per run on a loaded 2-core machine).
if out=$("$release" v0.1.1 --dry-run 2>&1); then fail "v0.1.1 without a CHANGELOG section accepted"
else ok "a version without a CHANGELOG section is refused after a release"; fi
sed -i 's/^## 0\.1\.0 (/## 0.2.0\n\n- Removed.\n\n## 0.1.1\n\n- Removed.\n\n## 0.1.0 (/' CHANGELOG.md
git rm -q zz_release_probe.go && git commit -q -am "remove the probe"
if out=$("$release" v0.1.1 --dry-run 2>&1); then fail "v0.1.1 accepted an incompatible change: $out"
elif printf '%s\n' "$out" | grep -q 'ReleaseProbe: removed' &&
	printf '%s\n' "$out" | grep -q 'incompatible API changes since v0.1.0'; then
	ok "the API check refuses a removed function in a patch version"
else fail "v0.1.1 refused, but not for the removed function: $out"; fi
if out=$("$release" v0.2.0 --dry-run 2>&1) && printf '%s\n' "$out" | grep -q '^v0\.2\.0 -> '; then
	ok "the API check lets a new minor version (before v1) remove a function"
else fail "v0.2.0 refused: $out"; fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
