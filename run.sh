#!/usr/bin/env bash
# The main job: set everything up, then train on "tpu" and check the result against the CPU.
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
"$root/scripts/setup.sh"
cd "$root"
exec .venv/bin/python -m torch_pjrt demo "$@"
