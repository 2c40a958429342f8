#!/usr/bin/env bash
# Set up the environment and run the whole test suite (slow end-to-end tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh tests
# qemu-user lets the int8 tests run ONNX Runtime on an emulated x86 CPU without VNNI
# (tests/test_quantization.py), so both int8 code paths are exercised on any machine.
if ! command -v qemu-x86_64 >/dev/null && command -v apt-get >/dev/null \
    && [ "$(id -u)" = 0 ]; then
  echo "installing qemu-user (emulates a CPU without VNNI for the int8 tests) ..."
  (apt-get update -qq && apt-get install -y -qq qemu-user >/dev/null) \
    || echo "qemu-user could not be installed: that test will be skipped"
fi
# Chromium renders the HTML report headless and checks it as a reader sees it: figures
# load, nothing wider than a 1280 px window (tests/test_report_browser.py).
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  echo "installing chromium (renders the HTML report for the browser test) ..."
  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
    || echo "chromium could not be installed: the browser test will be skipped"
fi
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
