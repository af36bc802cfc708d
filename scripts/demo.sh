#!/usr/bin/env bash
# The main job on a fresh machine: install what choir needs, build it, and run
# 4 local ranks through a correctness-checked sweep of every collective,
# printing a table (choir run -n 4 choir sweep).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release
exec build/release/bin/choir run -n 4 build/release/bin/choir sweep
