#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv, offline-capable.
# torch is pinned so the installer takes the local CPU wheel rather than resolving a CUDA
# build with several GB of dependencies.
# `setup.sh tests` also byte-compiles what only the tests and tools use (scripts/test.sh).
# `setup.sh run` is for a command that imports dlas, TVM and PyTorch and loads the plugins
# right after (the quickstart's `dlas run`): a fresh set-up leaves its import check to that
# command, which fails on the same import with its own traceback, and marks itself
# unchecked; the next set-up checks before anything else (scripts/quickstart.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
VENV="${DLAS_VENV:-.venv}"
stamp="$VENV/.dlas-setup-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
tests="$stamp-tests"
unchecked="$stamp-unchecked"
want_tests=$([ "${1:-}" = tests ] && echo 1 || true)
check_later=$([ "${1:-}" = run ] && echo 1 || true)
# The import check: the environment imports what every dlas process imports.
check() {
  "$VENV/bin/python" -c "import dlas, tvm, torch; from dlas import registry; registry.load_plugins()"
}
# A set-up whose check was left to the command after it: checked now, once (a failed check
# sets up again from the start).
if [ ! -f "$stamp" ] && [ -f "$unchecked" ]; then
  if check >/dev/null 2>&1; then
    mv "$unchecked" "$stamp"
  else
    echo "the environment in $VENV does not import (set up again) ..."
    rm -f "$unchecked"
    check_later=  # this time the check comes before the command, and says why
  fi
fi
if [ -f "$stamp" ] && { [ -z "$want_tests" ] || [ -f "$tests" ]; }; then
  exit 0
fi
SITE() { "$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
# pip's index mirror may warn about missing folders; keep the real messages.
quiet() { grep -v "^WARNING: Location" || true; }
# pip byte-compiles what it installs on one core (about 50 s of a fresh set-up here);
# compileall below does it on every core instead.
PIP=(--quiet --disable-pip-version-check --no-compile)
if [ ! -f "$stamp" ]; then
  echo "setting up $VENV (one time; a few minutes) ..."
  # Without pip of its own: ensurepip took 4.6 s of a 22 s set-up on a 2-vCPU Zen 4; uv
  # installs pip into it with the rest (0.3 s), for the tests and for users.
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv --without-pip "$VENV"
  # uv installs the same pins from the same sources as pip (scripts/pip_sources.py, read
  # from the interpreter's pip: the venv has none yet) in about a tenth of the time (44 s
  # -> 5 s on a 2-vCPU Zen 4); pip does it where uv cannot. uv's own wheel comes from the
  # interpreter's pip pointed at the venv (`--python`, pip 22.3 and later), asked for
  # briefly, so that a machine without a network reaches pip's path in seconds. Every
  # step writes to one log, so that whichever failed, the log says why.
  log="$VENV/uv-install.log"
  if { "$PYTHON" -m pip --python "$VENV/bin/python" install "${PIP[@]}" --retries 1 \
         --timeout 15 uv \
       && "$PYTHON" scripts/pip_sources.py > "$VENV/.uv-sources" \
       && mapfile -d '' SOURCES < "$VENV/.uv-sources" \
       && "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" "${SOURCES[@]}" \
            pip "setuptools>=64" wheel "torch==2.13.0" -e ".[test]"; } > "$log" 2>&1
  then
    :
  else
    echo "uv could not install (why: $log); installing with pip ..."
    "$VENV/bin/python" -m pip --version >/dev/null 2>&1 \
      || "$VENV/bin/python" -m ensurepip --upgrade --default-pip >/dev/null
    "$VENV/bin/python" -m pip install "${PIP[@]}" "setuptools>=64" wheel 2>&1 | quiet
    "$VENV/bin/python" -m pip install "${PIP[@]}" "torch==2.13.0" 2>&1 | quiet
    "$VENV/bin/python" -m pip install "${PIP[@]}" -e ".[test]" 2>&1 | quiet
  fi
  # Byte-compiled on every core: the folders a sweep imports from (scripts/sweep_imports.py:
  # 6,100 of 11,557 files, about half the time), or without that list every package but
  # those no sweep imports (ray's executor, RPC, the test runner, linters, installers);
  # `setup.sh tests` compiles everything.
  if ! "$VENV/bin/python" scripts/sweep_imports.py "$(SITE)" >/dev/null 2>&1; then
    "$VENV/bin/python" -m compileall -q -j 0 \
      -x '/site-packages/(ray|pygments|setuptools|pip|_pytest|pytest|tornado|ruff|uv)/' \
      "$(SITE)" >/dev/null 2>&1 || true
  fi
  rm -f "$VENV"/.dlas-setup-*
  if [ -n "$check_later" ]; then
    # the command that follows imports the same (4-7 s of one core on a 2-vCPU Zen 3)
    touch "$unchecked"
  else
    check
    touch "$stamp"
  fi
  echo "environment ready: $VENV"
fi
if [ -n "$want_tests" ]; then
  "$VENV/bin/python" -m compileall -q -j 0 "$(SITE)" >/dev/null 2>&1 || true
  touch "$tests"
fi
