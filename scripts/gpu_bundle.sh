#!/usr/bin/env bash
# Build, here, what a lent GPU machine needs to run dlas (see docs/gpu.md): TVM and the
# packages its image lacks, for its Python (3.12), in .gpu/ (git-ignored through
# .git/info/exclude). The machine has no network; what travels is limited to 64 MiB a call,
# and TVM's compiler library alone is 259 MB (59 MB as xz), so the bundle comes in two
# parts: .gpu/a (most of the library) and .gpu/b (the rest, the wheels).
#   bash scripts/gpu_bundle.sh        # once; minutes (xz of the library)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=.gpu
TMP=${GPU_BUNDLE_TMP:-/tmp/dlas-gpu-bundle}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
mkdir -p "$TMP" "$OUT/a" "$OUT/b"
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64)
# the versions this checkout runs with, as wheels for the GPU machine's CPython 3.12
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${PLATFORMS[@]}" -d "$TMP/wheels" \
    "apache-tvm==$(version apache-tvm)" "apache-tvm-ffi==$(version apache-tvm-ffi)" \
    "pydantic==$(version pydantic)" "pydantic-core==$(version pydantic-core)" \
    "annotated-types==$(version annotated-types)" \
    "typing-inspection==$(version typing-inspection)" "tornado==$(version tornado)" \
    "xgboost-cpu==$(version xgboost-cpu)" "torch-pruning==$(version torch-pruning)"
rm -f "$OUT"/b/*.whl
for w in "$TMP"/wheels/*.whl; do
    case "$(basename "$w")" in apache_tvm-*) ;; *) cp "$w" "$OUT/b/" ;; esac
done
TVM_WHEEL=$(ls "$TMP"/wheels/apache_tvm-*.whl)
STAMP="$(basename "$TVM_WHEEL") $(sha256sum < "$TVM_WHEEL" | cut -c1-16)"
if [ ! -f "$TMP/compiler.xz" ] || [ "$(cat "$TMP/compiler.from" 2>/dev/null)" != "$STAMP" ]; then
    rm -rf "$TMP/tvm" && mkdir -p "$TMP/tvm"
    (cd "$TMP/tvm" && unzip -q "$TVM_WHEEL")
    echo "compressing libtvm_compiler.so (several minutes)"
    xz -T0 -9 -c "$TMP/tvm/tvm/lib/libtvm_compiler.so" > "$TMP/compiler.xz.part"
    mv "$TMP/compiler.xz.part" "$TMP/compiler.xz"
    # the rest of the package, less CUTLASS's headers and the web runtime (BYOC, wasm)
    rm -rf "$TMP/tvm/tvm/lib/libtvm_compiler.so" "$TMP/tvm/tvm/3rdparty" "$TMP/tvm/tvm/web"
    tar cJf "$TMP/tvm_rest.tar.xz" -C "$TMP/tvm" .
    echo "$STAMP" > "$TMP/compiler.from"
fi
cp "$TMP/tvm_rest.tar.xz" "$OUT/b/"
rm -f "$OUT"/a/compiler.xz.* "$OUT"/b/compiler.xz.*
split -b 50M -a 1 "$TMP/compiler.xz" "$TMP/compiler.xz."
mv "$TMP/compiler.xz.a" "$OUT/a/"
for part in "$TMP"/compiler.xz.[b-z]; do [ -e "$part" ] && mv "$part" "$OUT/b/"; done
(cd "$TMP" && sha256sum compiler.xz | cut -d' ' -f1) > "$OUT/b/compiler.sha256"
du -sh "$OUT/a" "$OUT/b"
