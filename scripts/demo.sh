#!/usr/bin/env bash
# Builds wtxt and runs the main job on the included example models, with
# the time each step took. Outputs go to ./demo/.
# 1. One file: snapshot (HMAC + signature), verify, chain a second
#    generation, inspect, extract the arrays back to .npz.
# 2. In Git: a fresh repository under demo/repo, `wtxt git install`, two
#    signed generations committed through the pre-commit hook (which
#    verifies each, signature required), `git diff` of the two as a
#    semantic diff, and `wtxt log --verify` proving the chain from history.
set -euo pipefail
cd "$(dirname "$0")/.."
# WTXT_BIN: a wtxt already built (the README's test runs this with cargo's).
if [ -n "${WTXT_BIN:-}" ]; then
  w=$WTXT_BIN
else
  cargo build --release --quiet
  w=$PWD/target/release/wtxt
fi
k=$PWD/fixtures/wtxt/keys
in=$PWD/fixtures/wtxt/inputs
rm -rf demo && mkdir -p demo
step() { # title, command...
  local title=$1 t0 t1; shift
  printf '\n== %s\n' "$title"
  t0=$(date +%s%N)
  "$@"
  t1=$(date +%s%N)
  printf -- '-- %s: %d ms\n' "$title" $(((t1 - t0) / 1000000))
}

step "snapshot gen 0 (HMAC, signed)" \
  "$w" snapshot "$in/model.npz" -o demo/gen0.wtxt --build demo --hmac-key "$k/hmac.hex" --sign-key "$k/sign.pem"
step "verify gen 0" \
  "$w" verify demo/gen0.wtxt --hmac-key "$k/hmac.hex" --trusted-keys "$k/trusted_keys" --require-signature
step "snapshot gen 1, chained to gen 0" \
  "$w" snapshot "$in/model.npz" -o demo/gen1.wtxt --prev demo/gen0.wtxt --build demo --hmac-key "$k/hmac.hex" --sign-key "$k/sign.pem"
step "verify gen 1 and its link" \
  "$w" verify demo/gen1.wtxt --prev demo/gen0.wtxt --hmac-key "$k/hmac.hex" --trusted-keys "$k/trusted_keys" --require-signature
step "inspect gen 1" "$w" inspect demo/gen1.wtxt
step "extract gen 1 to .npz" "$w" extract demo/gen1.wtxt -o demo/gen1.npz

# The Git story: a model trained one step further is the next generation.
repo=demo/repo
git init -q -b main "$repo"
g() { git -C "$repo" -c user.name=demo -c user.email=demo@example.com "$@"; }
g config wtxt.requireSignature true
g config wtxt.trustedKeys "$k/trusted_keys"
step "wtxt git install (drivers, attributes, pre-commit hook)" bash -c "cd '$repo' && '$w' git install"
step "snapshot the model as generation 0" \
  "$w" snapshot "$in/delta_base.npz" -o "$repo/model.wtxt" --build demo --sign-key "$k/sign.pem"
step "commit generation 0 (the hook verifies it)" bash -c "git -C '$repo' add -A && git -C '$repo' -c user.name=demo -c user.email=demo@example.com commit -qm 'model: generation 0'"
cp "$repo/model.wtxt" demo/prev.wtxt
step "snapshot the trained model as generation 1" \
  "$w" snapshot "$in/delta_target.npz" -o "$repo/model.wtxt" --prev demo/prev.wtxt --build demo --sign-key "$k/sign.pem"
step "commit generation 1 (the hook verifies it and its link)" bash -c "git -C '$repo' add -A && git -C '$repo' -c user.name=demo -c user.email=demo@example.com commit -qm 'model: generation 1'"
step "git diff HEAD~1 HEAD (the semantic diff)" g --no-pager diff HEAD~1 HEAD
step "wtxt log --verify (the chain, every generation verified from its commit)" \
  "$w" log --verify -C "$repo" model.wtxt --trusted-keys "$k/trusted_keys"
printf '\ndemo: wrote demo/gen0.wtxt demo/gen1.wtxt demo/gen1.npz and the repository %s\n' "$repo"
