#!/usr/bin/env bash
# A pull request's review of its checkpoints: for every snapshot (*.wtxt)
# the commits since BASE changed, the two generations (read from history,
# parts and all, in a blobless or LFS clone too), verified whole, then
# `wtxt diff --format markdown` of them into OUT: the comment a CI job
# posts (github-actions.yml, gitlab-ci.yml). Exits 1 when a snapshot of
# HEAD fails verification.
#
#   examples/ci/review.sh BASE OUT.md      (in the repository)
set -euo pipefail
base=$1
out=$2
wtxt=${WTXT:-wtxt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$out"
status=0
while IFS= read -r -d '' path; do
  case "$path" in
    *.wtxt) ;;
    *) continue ;;
  esac
  # A snapshot removed by the pull request has no new side.
  git cat-file -e "HEAD:$path" 2>/dev/null || { printf '### `%s` removed\n\n' "$path" >> "$out"; continue; }
  "$wtxt" git export HEAD "$path" -o "$tmp/new.wtxt" >/dev/null 2>&1
  if ! "$wtxt" verify "$tmp/new.wtxt" > "$tmp/verify" 2>&1; then
    printf '### `%s` FAILS verification\n\n```\n%s\n```\n\n' "$path" "$(cat "$tmp/verify")" >> "$out"
    status=1
    continue
  fi
  if git cat-file -e "$base:$path" 2>/dev/null; then
    "$wtxt" git export "$base" "$path" -o "$tmp/old.wtxt" >/dev/null 2>&1
    printf '### `%s`: %s → HEAD\n' "$path" "$base" >> "$out"
    "$wtxt" diff --format markdown "$tmp/old.wtxt" "$tmp/new.wtxt" | tail -n +2 >> "$out"
  else
    printf '### `%s` added\n\n%s\n' "$path" "$(cat "$tmp/verify")" >> "$out"
  fi
  printf '\n' >> "$out"
done < <(git diff --name-only -z --no-renames "$base" HEAD)
exit $status
