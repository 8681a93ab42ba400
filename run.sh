#!/usr/bin/env bash
# The main job: set everything up, then run Hugging Face models on "tpu" (MiniLM semantic search, a tiny
# Qwen3 generating, a few training steps), every result checked against the CPU (python -m torch_pjrt demo).
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
"$root/scripts/setup.sh"
cd "$root"
exec .venv/bin/python -m torch_pjrt demo "$@"
