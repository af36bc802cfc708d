#!/usr/bin/env bash
# Configures and builds one CMake preset (default: release) with at most two
# compile jobs, the limit for a 2-core machine.
# Usage: scripts/build.sh [release|debug|tsan]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
