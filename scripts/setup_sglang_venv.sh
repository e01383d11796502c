#!/usr/bin/env bash
# Builds a CPU-only venv holding SGLang 0.5.23 that parses its own arguments and also serves a tiny model (no GPU deps), idempotently.
set -euo pipefail

VENV_DIR="${1:-$(cd "$(dirname "$0")/.." && pwd)/.ci/venvs/sglang}"
PYTHON="${PYTHON:-python3}"
SGLANG_VERSION="0.5.23"
TORCH_VERSION="2.13.0"
# SGLang's model gateway (formerly sglang-router): 1.13.0 is the release current when SGLang 0.5.23 shipped.
SMG_VERSION="1.13.0"
# Prefill/decode on the CPU: mooncake's transfer engine over TCP (MOONCAKE_PROTOCOL=tcp), its non-CUDA build. Its
# engine.so links libibverbs.so.1 even for TCP; the pyverbs wheel (rdma-core 48's Python bindings, no CUDA) vendors
# that library and its libnl-3/libnl-route-3 deps under pyverbs.libs/ (docs/sglang-cpu-tier.md, "Prefill/decode").
MOONCAKE_VERSION="0.3.13.post1"
PYVERBS_VERSION="56.0rc1"
MSGPACK_VERSION="1.2.4"
REPO_DIR="$(cd "$(dirname "$0")/.." && pwd)"
# "-server" in the stamp: a venv stamped by the parser-only script lacks the server's packages and is upgraded in place.
STAMP="$VENV_DIR/.sglbench-sglang-$SGLANG_VERSION-server-ok"

STANDINS_DIR="$REPO_DIR/sglang_cpu_standins"
STANDINS_STAMP="$VENV_DIR/.sglbench-cpu-standins.sha256"
PIP=("$VENV_DIR/bin/python" -m pip install --quiet --no-input)
# SGLBENCH_PIP_NO_COMPILE=1 (set by .ci/run): no .pyc at install; the first import writes the ones used
if [[ "${SGLBENCH_PIP_NO_COMPILE:-}" == 1 ]]; then PIP+=(--no-compile); fi
# pip's notes about file:// index locations and about sglang's unmet GPU pins are expected: keep the log readable.
quiet() {
    "$@" 2>&1 | { grep -v -e "is ignored: it is neither" -e "^sglang .* requires" -e "dependency resolver" || true; }
    return "${PIPESTATUS[0]}"
}
standins_hash() {
    (cd "$STANDINS_DIR" && find . -type f -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}
# The CPU test stand-ins (sgl_kernel, torchvision, the has_amx hook): --no-deps, they need only the venv's torch.
# Not editable: the .pth hook must be a real file in site-packages. Reinstalled whenever their source changes.
install_standins() {
    quiet "${PIP[@]}" --no-deps --force-reinstall "$STANDINS_DIR"
    standins_hash > "$STANDINS_STAMP"
}

# The gateway's launcher (`smg launch`) imports only setproctitle and PyYAML (installed below); --no-deps keeps out
# grpcio/protobuf, which only `smg serve`'s gRPC workers use (protobuf would change what transformers imports).
gateway_current() {
    "$VENV_DIR/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("smg") != sys.argv[1])' "$SMG_VERSION" 2>/dev/null
}
install_gateway() {
    quiet "${PIP[@]}" --no-deps "smg==$SMG_VERSION"
}

# mooncake and pyverbs --no-deps (pyverbs is wanted only for its vendored libraries; mooncake's other deps, aiohttp
# and requests, are installed below). The auditwheel-renamed libibverbs is linked into mooncake/ as libibverbs.so.1,
# beside its libnl deps, where engine.so's RPATH ($ORIGIN) finds them: no LD_LIBRARY_PATH, no system package.
mooncake_current() {
    "$VENV_DIR/bin/python" - "$MOONCAKE_VERSION" "$PYVERBS_VERSION" 2>/dev/null <<'PY'
import importlib.metadata as m, pathlib, sys
ok = m.version("mooncake-transfer-engine-non-cuda") == sys.argv[1] and m.version("pyverbs") == sys.argv[2]
files = m.files("mooncake-transfer-engine-non-cuda") or []
engine = [f for f in files if str(f) == "mooncake/engine.so"]
sys.exit(not (ok and engine and (pathlib.Path(engine[0].locate()).parent / "libibverbs.so.1").exists()))
PY
}
install_mooncake() {
    quiet "${PIP[@]}" --no-deps "mooncake-transfer-engine-non-cuda==$MOONCAKE_VERSION" "pyverbs==$PYVERBS_VERSION" \
        "msgpack==$MSGPACK_VERSION"
    local site
    site="$("$VENV_DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    local libs=("$site"/pyverbs.libs/libibverbs-*.so.* "$site"/pyverbs.libs/libnl-3-*.so.* "$site"/pyverbs.libs/libnl-route-3-*.so.*)
    if [[ ! -e "${libs[0]}" || ! -e "${libs[1]}" || ! -e "${libs[2]}" ]]; then
        echo "FATAL: pyverbs $PYVERBS_VERSION did not vendor libibverbs and libnl-3/libnl-route-3: ${libs[*]}" >&2
        return 1
    fi
    ln -sfn "../pyverbs.libs/$(basename "${libs[0]}")" "$site/mooncake/libibverbs.so.1"
    ln -sfn "../pyverbs.libs/$(basename "${libs[1]}")" "$site/mooncake/$(basename "${libs[1]}")"
    ln -sfn "../pyverbs.libs/$(basename "${libs[2]}")" "$site/mooncake/$(basename "${libs[2]}")"
    "$VENV_DIR/bin/python" -c 'import mooncake.engine' || { echo "FATAL: mooncake.engine does not load" >&2; return 1; }
}

if [[ -f "$STAMP" ]]; then
    if ! mooncake_current; then
        install_mooncake
        echo "sglang venv: mooncake $MOONCAKE_VERSION (TCP, non-CUDA) with pyverbs $PYVERBS_VERSION's libibverbs installed"
    fi
    if ! gateway_current; then
        install_gateway
        echo "sglang venv: gateway smg $SMG_VERSION installed"
    fi
    if [[ "$(cat "$STANDINS_STAMP" 2>/dev/null)" != "$(standins_hash)" ]]; then
        install_standins
        echo "sglang venv: CPU stand-ins reinstalled from $STANDINS_DIR"
    fi
    echo "sglang venv ready: $VENV_DIR"
    exit 0
fi

start_s=$(date +%s)
"$PYTHON" -m venv "$VENV_DIR"

# The CPU torch wheel: --no-deps keeps pip from pulling any nvidia-* packages; its real deps are listed here.
quiet "${PIP[@]}" --no-deps "torch==$TORCH_VERSION"
quiet "${PIP[@]}" filelock typing-extensions sympy networkx jinja2 fsspec "setuptools>=77.0.3"
# SGLang itself without its metadata's GPU pins (torch 2.14.1, flashinfer, sglang-kernel).
quiet "${PIP[@]}" --no-deps "sglang==$SGLANG_VERSION"
# What sglang.srt.server_args imports at module load (triton: the real wheel, a stub breaks torch's flop_counter).
quiet "${PIP[@]}" aiohttp anyio fastapi starlette uvicorn huggingface_hub msgspec numpy orjson packaging pillow psutil \
    pybase64 pydantic pyzmq requests tqdm ipython PyYAML rich typer triton
# What the OpenAI protocol models and io_struct import.
# (pins follow sglang 0.5.23's own metadata where it pins)
quiet "${PIP[@]}" "openai==2.8.0" "transformers==5.19.0" "tokenizers==0.23.2" dill "apache-tvm-ffi==0.1.11" \
    "sentencepiece==0.2.1" "compressed-tensors==0.18.0" gguf partial-json-parser safetensors
# What launch_server, the scheduler and the tokenizer manager import before a server is healthy (each found by a
# failing import on a CPU server start; docs/sglang-cpu-tier.md).
quiet "${PIP[@]}" uvloop prometheus-client setproctitle einops jsonschema xgrammar soundfile python-multipart
install_standins
install_gateway
install_mooncake

"$VENV_DIR/bin/python" - <<'PY'
import torch
assert torch.version.cuda is None, f"expected a CPU torch build, got CUDA {torch.version.cuda}"
import importlib.metadata as m
bad = [d.metadata["Name"] for d in m.distributions() if d.metadata["Name"].lower().startswith("nvidia")]
assert not bad, f"CUDA packages pulled into the venv: {bad}"
print("torch", torch.__version__, "sglang", m.version("sglang"), "stand-ins", m.version("sglbench-cpu-standins"),
      "gateway smg", m.version("smg"), "mooncake", m.version("mooncake-transfer-engine-non-cuda"))
PY
installed="$("$VENV_DIR/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))')"
if [[ "$installed" != "$SGLANG_VERSION" ]]; then
    echo "FATAL: $VENV_DIR has sglang $installed, the CPU tier's stand-ins are written for exactly $SGLANG_VERSION" >&2
    exit 1
fi
touch "$STAMP"
echo "sglang venv built in $(( $(date +%s) - start_s )) s, $(du -sh "$VENV_DIR" | cut -f1): $VENV_DIR"
