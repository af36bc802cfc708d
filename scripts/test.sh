#!/usr/bin/env bash
# Installs, builds and runs every test: unit and multi-process tests in the
# release build and again under AddressSanitizer + UndefinedBehaviorSanitizer
# (debug preset), then the PyTorch backend tests. Exits nonzero on any failure.
# Usage: scripts/test.sh            (as root on Debian 12)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

start=$(date +%s)
for preset in release debug; do
  echo "=== build ($preset)"
  scripts/build.sh "$preset"
  echo "=== ctest ($preset)"
  ctest --preset "$preset"
done

echo "=== PyTorch backend tests"
CHOIR_BUILD_DIR=build/release PYTHONPATH=build/release/python \
  /usr/bin/python3 -m pytest -q integrations/torch/tests
echo "=== all tests passed in $(( $(date +%s) - start )) s"
