"""Measure server start time, greedy-output equality and NEXTN acceptance per tiny MiMo model and draft-step count.

    python3 tests/sglang_cpu/measure_acceptance.py MODELS_DIR [--models echo mix rand] [--steps 1 2 3]
        [--venv .ci/venvs/sglang] [--captures DIR]
MODELS_DIR comes from build_mimo_model.py. One server at a time (the CI machine has 2 cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sglang_cpu_server import PROMPTS, SGLangCPUServer, accept_length, baseline_args, nextn_args  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def capture(server: SGLangCPUServer, tag: str, out_dir: Path) -> None:
    """Raw responses for contract fixtures: non-streamed and streamed /generate, /server_info, /metrics, an error."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _, body = server.generate(PROMPTS[0], 12)
    (out_dir / f"generate_nonstream_{tag}.json").write_text(body)
    _, body = server.generate(PROMPTS[0], 12, stream=True)
    (out_dir / f"generate_stream_{tag}.sse").write_text(body)
    status, body = server.request("/generate", {"text": PROMPTS[0], "sampling_params": {"max_new_tokens": -1}})
    (out_dir / f"error_negative_max_new_tokens_{tag}.json").write_text(json.dumps({"status": status, "body": body}))
    for path, name in (("/server_info", f"server_info_{tag}.json"), ("/metrics", f"metrics_{tag}.txt"),
                       ("/v1/models", f"v1_models_{tag}.json")):
        _, body = server.request(path)
        (out_dir / name).write_text(body)


def run_one(python: Path, model: Path, args: list[str], tag: str, log_dir: Path, captures: Path | None):
    server = SGLangCPUServer(python=python, model=model, extra_args=args, log_path=log_dir / f"{tag}.log")
    try:
        start_s = server.start()
        t0 = time.monotonic()
        outs = server.greedy_outputs()
        gen_s = time.monotonic() - t0
        if captures is not None:
            capture(server, tag, captures)
        return start_s, gen_s, outs
    finally:
        server.stop()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models_dir", type=Path)
    ap.add_argument("--models", nargs="+", default=["echo", "mix", "rand"])
    ap.add_argument("--steps", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--venv", type=Path, default=REPO / ".ci" / "venvs" / "sglang")
    ap.add_argument("--captures", type=Path, default=None)
    ns = ap.parse_args(argv)
    python = ns.venv / "bin" / "python"
    log_dir = Path(tempfile.mkdtemp(prefix="sglang-cpu-logs-"))
    rows = []
    for name in ns.models:
        model = ns.models_dir / name
        start_s, gen_s, base = run_one(python, model, baseline_args(), f"{name}_baseline", log_dir, ns.captures)
        print(f"{name:5s} baseline: start {start_s:5.1f} s, 5x32 tokens {gen_s:4.1f} s", flush=True)
        base_ids = [o["text"] for o in base]
        for steps in ns.steps:
            start_s, gen_s, outs = run_one(python, model, nextn_args(steps), f"{name}_nextn{steps}", log_dir, ns.captures)
            same = sum(a == o["text"] for a, o in zip(base_ids, outs))
            acc = accept_length(outs)
            rows.append({"model": name, "steps": steps, "start_s": round(start_s, 1), "accept_length": round(acc, 3),
                         "same_as_baseline": f"{same}/{len(outs)}",
                         "spec_accept_length": [o["meta_info"].get("spec_accept_length") for o in outs]})
            print(f"{name:5s} NEXTN-{steps}: start {start_s:5.1f} s, 5x32 tokens {gen_s:4.1f} s, accept length "
                  f"{acc:.3f}, greedy outputs equal to baseline {same}/{len(outs)}", flush=True)
    print(json.dumps(rows, indent=1))
    print(f"server logs: {log_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
