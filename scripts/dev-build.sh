#!/usr/bin/env bash
# Incremental developer build without reinstalling: builds _C in BUILD_DIR and assembles an importable
# package in PKG_DIR (symlinks to python/torch_pjrt plus the built extension). Separate build folders let
# several people build at once. Usage: scripts/dev-build.sh [BUILD_DIR] [PKG_DIR]; then
#   PYTHONPATH=PKG_DIR python -m pytest tests/python
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
pkg=${2:-$root/build/pkg}
python=${PYTHON:-$root/.venv/bin/python}
mkdir -p "$build" "$pkg/torch_pjrt"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DPython3_EXECUTABLE="$python" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j "${MAX_JOBS:-2}"
for f in "$root"/python/torch_pjrt/*.py; do ln -sf "$f" "$pkg/torch_pjrt/"; done
# copy then rename: overwriting a loaded library in place crashes processes still using it
for so in "$build"/_C*.so; do cp "$so" "$pkg/torch_pjrt/.new.so" && mv "$pkg/torch_pjrt/.new.so" "$pkg/torch_pjrt/$(basename "$so")"; done
echo "PYTHONPATH=$pkg"
