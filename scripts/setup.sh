#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv, offline-capable.
# torch is installed first and pinned so pip takes the local CPU wheel rather than
# resolving a CUDA build with several GB of dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
VENV="${DLAS_VENV:-.venv}"
stamp="$VENV/.dlas-setup-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then
  exit 0
fi
# pip's index mirror may warn about missing folders; keep the real messages.
quiet() { grep -v "^WARNING: Location" || true; }
# pip byte-compiles what it installs on one core (about 50 s of a fresh set-up here);
# compileall below does it on every core instead.
PIP=(--quiet --disable-pip-version-check --no-compile)
echo "setting up $VENV (one time; a few minutes) ..."
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install "${PIP[@]}" "setuptools>=64" wheel 2>&1 | quiet
"$VENV/bin/python" -m pip install "${PIP[@]}" "torch==2.13.0" 2>&1 | quiet
"$VENV/bin/python" -m pip install "${PIP[@]}" -e ".[test]" 2>&1 | quiet
"$VENV/bin/python" -m compileall -q -j 0 "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 || true
"$VENV/bin/python" -c "import dlas, tvm, torch; from dlas import registry; registry.load_plugins()"
rm -f "$VENV"/.dlas-setup-*
touch "$stamp"
echo "environment ready: $VENV"
