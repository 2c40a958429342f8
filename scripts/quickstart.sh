#!/usr/bin/env bash
# Set up the environment and run the quickstart sweep on the offline digits dataset.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/dlas run configs/quickstart.yaml "$@"
