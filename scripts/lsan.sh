#!/usr/bin/env bash
# LeakSanitizer run (issue 8; not part of CI: it needs the LSan runtime and takes minutes).
#
#   scripts/lsan.sh [BUILD_DIR] [TRAIN_STEPS] [DECODE_STEPS]     (defaults: build-lsan, 200, 50)
#
# Builds _C with frame pointers in BUILD_DIR (RelWithDebInfo, so stacks have symbols), then runs
# bench/leak_run.py's encoder training and tiny-Llama decode plus a few ops (errors, the CPU fallback,
# growable cat, storage resizes, threads: scripts/lsan_workload.py) in .venv/bin/python with the LSan
# runtime preloaded and PYTHONMALLOC=malloc, so that every Python object is a malloc LSan tracks.
#
# Stacks are taken by LSan's fast (frame-pointer) unwinder: the slow DWARF unwinder is far too slow for
# the millions of allocations of `import torch` and hung in our tries. CPython, torch and the PJRT plugin
# have no frame pointers, so a stack stops at their first frame; a stack that reaches our extension shows
# its frames (_C_torch*.so, torch_pjrt::), since _C is built with them. scripts/lsan.supp suppresses what is
# CPython's, torch's and the plugin's own (objects alive at exit by design); the summary at the end
# counts the leak reports left and which of them have a frame in our extension: those are the ones to
# read (a leak of ours, or the runtime's own reached through our calls; each is printed whole).
# Full reports: $LSAN_OUT/lsan.<pid> (default /tmp/torch_pjrt_lsan).
#
# LSAN_LIB overrides the runtime (default: gcc's liblsan.so.0; `apt-get install liblsan0` if missing).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-lsan}
train=${2:-200}
decode=${3:-50}
lib=${LSAN_LIB:-/usr/lib/x86_64-linux-gnu/liblsan.so.0}
out=${LSAN_OUT:-/tmp/torch_pjrt_lsan}
python=${PYTHON:-$root/.venv/bin/python}
[ -f "$lib" ] || { echo "no LSan runtime at $lib (apt-get install liblsan0, or set LSAN_LIB)" >&2; exit 2; }

mkdir -p "$build"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DPython3_EXECUTABLE="$python" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer" >/dev/null
fi
cmake --build "$build" -j "${MAX_JOBS:-2}"
pkg=$build/pkg
mkdir -p "$pkg/torch_pjrt"
for f in "$root"/python/torch_pjrt/*.py; do ln -sf "$f" "$pkg/torch_pjrt/"; done
for so in "$build"/_C*.so; do cp "$so" "$pkg/torch_pjrt/.new.so" && mv "$pkg/torch_pjrt/.new.so" "$pkg/torch_pjrt/$(basename "$so")"; done

rm -rf "$out" && mkdir -p "$out"
set +e
LD_PRELOAD=$lib PYTHONMALLOC=malloc \
  LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=1:report_objects=0:malloc_context_size=100:log_path=$out/lsan" \
  PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}" TORCH_PJRT_CACHE_DIR= \
  "$python" "$root/scripts/lsan_workload.py" --train "$train" --decode "$decode"
rc=$?
set -e
echo "workload exit status: $rc (LSan exits 23 when it reports leaks)"
"$python" - "$out" <<'EOF'
import glob, re, sys
reports, ours, supp = [], [], []
for path in sorted(glob.glob(sys.argv[1] + "/lsan.*")):
    text = open(path).read()
    for block in re.split(r"\n(?=(?:Direct|Indirect) leak of )", text):
        if re.match(r"(Direct|Indirect) leak of ", block):
            block = block.split("\n\n")[0]
            reports.append(block)
            # our frames: symbolized to csrc/ sources, or named by module or namespace where not
            if re.search(r"/csrc/|/_C[^/ ]*\.so|torch_pjrt::", block):
                ours.append(block)
    supp += re.findall(r"^\s*\d+\s+\d+\s+\S+$", text, re.M)
print(f"LSan: {len(reports)} leak reports after suppressions, {len(ours)} with a frame in our extension")
for b in ours:  # where each was allocated: the first frame after the allocator
    frames = [l for l in b.splitlines()[1:] if " in " in l]
    print("  ours:", b.splitlines()[0], "|", frames[1].split(" in ", 1)[1][:160] if len(frames) > 1 else "")
for s in supp:
    print("  suppressed (count bytes pattern):", s.strip())
for b in ours:
    print(b, "\n")
EOF
