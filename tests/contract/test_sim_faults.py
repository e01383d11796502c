"""Simulator lifecycle and fault knobs: SIGTERM, slow start, failed start, port conflict, crash, garbage, MTP absent."""

from __future__ import annotations

import json
import time

from sim_process import SimHandle, start_sim, stop_sim


def _gen(h: SimHandle, n: int = 20, text: str = "hello") -> dict:
    status, body = h.post("/generate", {"text": text, "sampling_params": {"max_new_tokens": n, "ignore_eos": True}})
    assert status == 200
    return json.loads(body)


def test_sigterm_exits_cleanly_and_prints_ready(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory()
    h.proc.terminate()
    assert h.proc.wait(timeout=10) == 0
    out = h.proc.stdout.read().decode()
    assert "The server is fired up and ready to roll!" in out


def test_start_delay_503_then_200(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory(knobs={"start_delay_s": 1.0}, wait_healthy=False)
    deadline = time.monotonic() + 10
    codes: list[int] = []
    while time.monotonic() < deadline:
        try:
            codes.append(h.get("/health_generate")[0])
        except OSError:
            pass
        if codes and codes[-1] == 200:
            break
        time.sleep(0.05)
    assert 503 in codes and codes[-1] == 200


def test_fail_start_and_port_conflict(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory(knobs={"fail_start": "no GPU today"}, wait_healthy=False)
    assert h.proc.wait(timeout=10) == 1
    assert "no GPU today" in h.proc.stdout.read().decode()
    a = sim_factory()
    b = start_sim(["--port", str(a.port)], {}, wait_healthy=False)
    try:
        assert b.proc.wait(timeout=10) == 1
        assert f"cannot bind 127.0.0.1:{a.port}" in b.proc.stdout.read().decode()
    finally:
        stop_sim(b)


def test_bad_knob_is_one_clear_line(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory(knobs={"time_scle": 0}, wait_healthy=False)
    assert h.proc.wait(timeout=10) == 2
    out = h.proc.stdout.read().decode().strip().splitlines()
    assert out == [out[-1]] and "time_scle" in out[-1] and "Traceback" not in out[-1]


def test_crash_after_requests(sim_factory) -> None:  # type: ignore[no-untyped-def]
    h = sim_factory(knobs={"crash_after_requests": 2})
    _gen(h, 3)
    _gen(h, 3)
    assert h.proc.wait(timeout=10) == 1


def test_garbage_output_and_mtp_absent(sim_factory) -> None:  # type: ignore[no-untyped-def]
    g = sim_factory(knobs={"garbage_output": True})
    out = _gen(g, 8, "Reply with OK")
    assert out["text"] == "NaN" * 8 and len(set(out["output_ids"])) == 1
    m = sim_factory(["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2",
                     "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"], knobs={"mtp_absent": True})
    mi = _gen(m, 30)["meta_info"]
    assert mi["spec_verify_ct"] == 29 and mi["spec_num_correct_drafts"] == 0
    assert (mi["completion_tokens"] - 1) / mi["spec_verify_ct"] == 1.0


def test_late_divergence_only_on_speculative(sim_factory) -> None:  # type: ignore[no-untyped-def]
    knobs = {"late_divergence_after": 10}
    base = _gen(sim_factory(knobs=knobs), 20)["output_ids"]
    spec = _gen(sim_factory(["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1",
                             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2"], knobs=knobs),
                20)["output_ids"]
    assert base[:10] == spec[:10] and base[10:] != spec[10:]
