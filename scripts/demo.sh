#!/usr/bin/env bash
# Builds wtxt and runs the main job on the included example model:
# snapshot (HMAC + signature), verify, inspect, chain a second generation,
# then extract the arrays back to .npz. Outputs go to ./demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
w=target/release/wtxt
k=fixtures/wtxt/keys
mkdir -p demo
$w snapshot fixtures/wtxt/inputs/model.npz -o demo/gen0.wtxt --build demo --hmac-key $k/hmac.hex --sign-key $k/sign.pem
$w verify demo/gen0.wtxt --hmac-key $k/hmac.hex --trusted-keys $k/trusted_keys --require-signature
$w snapshot fixtures/wtxt/inputs/model.npz -o demo/gen1.wtxt --prev demo/gen0.wtxt --build demo --hmac-key $k/hmac.hex --sign-key $k/sign.pem
$w verify demo/gen1.wtxt --prev demo/gen0.wtxt --hmac-key $k/hmac.hex --trusted-keys $k/trusted_keys --require-signature
$w inspect demo/gen1.wtxt
$w extract demo/gen1.wtxt -o demo/gen1.npz
echo "demo: wrote demo/gen0.wtxt demo/gen1.wtxt demo/gen1.npz"
