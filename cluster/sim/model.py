"""Pure step/timing model of the simulated SGLang engine: knobs, step times, speculative acceptance, outputs, batching.

No I/O and no event loop here (pydantic validates the knobs): `Scheduler.plan_step()` admits requests and says how long the next forward
takes (model milliseconds, before `time_scale`), `Scheduler.commit_step()` applies it. The HTTP server in
`sim.py` sleeps between the two. SGLang 0.5.23's launch rules over the simulator's argv are engines/sim_launch.py.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from cluster.config.sim_knobs import Knobs
from cluster.engines.sim_launch import SpecParams
from cluster.input_files import JsonValue

EOS_ID = 0
OK_ID = 1
ANSWER_323_ID = 2
GARBAGE_ID = 3
ANSWER_10_ID = 4
VOCAB_BASE = 100
VOCAB_SIZE = 32000
DIGIT_BASE = 10
"""Ids DIGIT_BASE..DIGIT_BASE+9 are the digits 0-9 of an arithmetic answer; MINUS_ID its sign."""
MINUS_ID = 20
SPECIAL_PIECES = {EOS_ID: "", OK_ID: "OK", ANSWER_323_ID: "323", GARBAGE_ID: "NaN", ANSWER_10_ID: "10",
                  MINUS_ID: "-", **{DIGIT_BASE + d: str(d) for d in range(10)}}
ARITHMETIC = re.compile(r"What is (\d{1,6}) ([-+*]) (\d{1,6})\?")
"""A question of the shipped accuracy task (scripts/arithmetic_eval.py), which the simulated model answers."""
MULTIPLY_MARKERS = ("17*19", "17 × 19", "17x19", "17 x 19", "17 multiplied by 19")
REASONING_THOUGHT_TOKENS = 48
"""The apples prompt of the correctness gate is answered after this many 'thinking' tokens, so a speculative
variant runs enough verify steps during the gate for its acceptance length to be judged."""


def accept_probs_for(knobs: Knobs, num_steps: int, category: Optional[str] = None,
                     dp_rank: int = 0, setting: Optional[str] = None) -> tuple[float, ...]:
    """Per-draft-position acceptance probabilities (the last one repeated), zeros when the MTP head is absent;
    a category with its own entry in `category_accept_probs` uses that one, else the request's chat template
    `setting` (the header's `name=value` pairs) one in `template_accept_probs`, else the DP rank's
    `dp_accept_probs`."""
    if knobs.mtp_absent:
        return (0.0,) * num_steps
    default = knobs.dp_accept_probs[dp_rank] if knobs.dp_accept_probs else knobs.accept_probs
    for pair in (setting or "").split("; "):
        if pair in knobs.template_accept_probs:
            default = knobs.template_accept_probs[pair]
            break
    p = list(knobs.category_accept_probs.get(category, default) if category else default)
    while len(p) < num_steps:
        p.append(p[-1])
    return tuple(p[:num_steps])


def expected_accept_length(probs: Sequence[float]) -> float:
    """Expected tokens per verify step: 1 + p1 + p1·p2 + … (stop at the first rejection)."""
    total, run = 1.0, 1.0
    for p in probs:
        run *= p
        total += run
    return total


def draw_accepted(rng: random.Random, probs: Sequence[float]) -> int:
    """Accepted draft tokens in one verify step: accept position i with probability p_i, stop at the first rejection."""
    n = 0
    for p in probs:
        if rng.random() >= p:
            break
        n += 1
    return n


def step_time_ms(knobs: Knobs, decode_batch: int, prefill_tokens: int, spec: Optional[SpecParams]) -> float:
    """Model time of one scheduler step (before time_scale): a + b·batch, prefill per token, draft and verify costs."""
    t = knobs.decode_base_ms + knobs.decode_per_req_ms * decode_batch + knobs.prefill_per_token_ms * prefill_tokens
    if spec is not None and decode_batch > 0:
        t += knobs.draft_step_ms * spec.num_steps
        t += knobs.verify_per_draft_token_ms * (spec.num_draft_tokens - 1) * decode_batch
    return t * knobs.tuned_speed_factor


def _seed_from(*parts: Any) -> int:
    h = hashlib.blake2b(repr(parts).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


def prompt_key(input_ids: Optional[Sequence[int]], text: Optional[str]) -> str:
    """A stable key for a prompt (its ids or its text)."""
    if input_ids is not None:
        return "ids:" + ",".join(str(i) for i in input_ids)
    return "text:" + (text or "")


PREFIX_BLOCK_TOKENS = 16
"""The simulated prefix cache matches prompts by whole blocks of this many leading ids (SGLang's radix tree matches
token by token at page size 1): a shared prefix of P tokens is served as 16 * floor(P / 16) cached tokens."""


def prefix_blocks(input_ids: Sequence[int], after: int = 0) -> tuple[int, ...]:
    """Chained hashes of a prompt's leading whole blocks: the k-th covers input_ids[:16 * (k + 1)], so two prompts
    share their first k hashes exactly when they share their first 16 * k ids (up to hash collisions). `after`: the
    hash of the whole blocks before `input_ids` (their chain goes on from it)."""
    b = PREFIX_BLOCK_TOKENS
    ids = tuple(input_ids)
    out: list[int] = []
    h = after
    for k in range(len(ids) // b):
        h = hash((h, ids[k * b:(k + 1) * b]))
        out.append(h)
    return tuple(out)


def piece(token_id: int) -> str:
    """Deterministic decode of one token id (ASCII only, never needs JSON escaping)."""
    sp = SPECIAL_PIECES.get(token_id)
    return sp if sp is not None else f"tok{token_id} "


def _chain(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [VOCAB_BASE + rng.randrange(VOCAB_SIZE) for _ in range(n)]


def arithmetic_ids(text: str, wrong: bool) -> list[int]:
    """The answer ids of an ARITHMETIC question in `text` ([] for none): its value's digits, the last one off by
    one when `wrong`."""
    m = ARITHMETIC.search(text)
    if m is None:
        return []
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    value = a + b if op == "+" else a - b if op == "-" else a * b
    digits = [int(c) for c in str(abs(value))]
    if wrong:
        digits[-1] = (digits[-1] + 1) % 10
    return ([MINUS_ID] if value < 0 else []) + [DIGIT_BASE + d for d in digits]


def output_ids(
    knobs: Knobs, key: str, text: Optional[str], max_new_tokens: int, ignore_eos: bool, speculative: bool,
    mixed_batch: bool = False,
) -> tuple[list[int], bool]:
    """Greedy output ids for a prompt and whether they end on EOS (a 'stop' finish); identical across variants
    except after `late_divergence_after` tokens on speculative ones, and for an arithmetic question asked in a
    `mixed_batch` (others running) with the knob wrong_answers_in_mixed_batch."""
    n = max(0, max_new_tokens)
    if knobs.garbage_output:
        return [GARBAGE_ID] * n, False
    answer: list[int] = []
    if knobs.answers and text is not None:
        if "Reply with OK" in text or ("Reply" in text and text.rstrip().endswith("OK")):
            answer = [OK_ID]
        elif any(m in text for m in MULTIPLY_MARKERS):
            answer = [ANSWER_323_ID]
        elif "apples" in text:
            answer = _chain(_seed_from(knobs.seed, key, "thought"), REASONING_THOUGHT_TOKENS) + [ANSWER_10_ID]
        else:
            answer = arithmetic_ids(text, knobs.wrong_answers_in_mixed_batch and mixed_batch)
    div = knobs.late_divergence_after
    if answer and not ignore_eos:
        if speculative and div is not None and div < len(answer) - 1:
            # drift inside the "thinking" part only: the final answer token stays right, as a harmless drift does
            answer[div:-1] = _chain(_seed_from(knobs.seed, key, "late-divergence"), len(answer) - 1 - div)
        ids = (answer + [EOS_ID])[:n]
        return ids, len(ids) == len(answer) + 1
    base = _seed_from(knobs.seed, key)
    ids = answer + _chain(base, n)
    ids = ids[:n]
    if speculative and div is not None and div < n:
        ids[div:] = _chain(_seed_from(knobs.seed, key, "late-divergence"), n - div)
    return ids, False


@dataclass
class SimRequest:
    """One request's state inside the scheduler."""

    rid: str
    prompt_tokens: int
    key: str
    out_ids: list[int]
    stops_on_eos: bool
    accept_rng: random.Random
    probs: tuple[float, ...] = ()
    """This request's per-draft-position acceptance probabilities (its category's, else the knob's)."""
    blocks: tuple[int, ...] = ()
    """prefix_blocks of the prompt's ids (none for text prompts, or with the prefix cache off)."""
    tail_ids: Optional[tuple[int, ...]] = None
    """The prompt's ids after its whole blocks (None for text prompts or with the prefix cache off): a finished
    request caches its prompt and its answer but the last token, as SGLang's radix cache does, so a session's next
    turn finds both."""
    cached_tokens: int = 0
    dp_rank: int = 0
    """The attention-DP rank serving it (knob dp_accept_probs; 0 with one rank)."""
    generated: int = 0
    spec_verify_ct: int = 0
    spec_num_correct_drafts: int = 0
    spec_num_proposed_drafts: int = 0
    spec_correct_drafts_histogram: list[int] = field(default_factory=list)
    """Verify steps by accepted drafts (index = drafts accepted), grown as needed as SGLang's
    Req.update_spec_correct_drafts_histogram does: its length is the most drafts accepted + 1."""
    finished: bool = False
    admitted: bool = False
    prefilled: bool = False
    """Its prompt's KV came from a prefill server (a simulated PD decode): its first step computes no prefill."""
    on_progress: Optional[Callable[[], None]] = None
    """Called by the server after a step gave this request tokens (wakes its HTTP handler)."""

    @property
    def target(self) -> int:
        return len(self.out_ids)

    def finish_reason(self) -> Optional[dict[str, JsonValue]]:
        if not self.finished:
            return None
        if self.stops_on_eos:
            return {"type": "stop", "matched": EOS_ID}
        return {"type": "length", "length": self.target}


@dataclass
class Counters:
    """Server-lifetime counters (the spec ones are reset by /flush_cache)."""

    spec_accept_tokens: int = 0
    spec_forward_ct: int = 0
    spec_verify_calls_total: int = 0
    generation_tokens_total: int = 0
    prompt_tokens_total: int = 0
    num_requests_total: int = 0
    interval_tokens: int = 0
    interval_verify: int = 0
    interval_accept_tokens: int = 0
    interval_steps: int = 0
    last_interval_accept_length: Optional[float] = None
    rank_accept_tokens: dict[int, int] = field(default_factory=dict)
    """Per DP rank, the spec_accept_tokens of its requests (reset by /flush_cache with the others)."""
    rank_forward_ct: dict[int, int] = field(default_factory=dict)


class Scheduler:
    """Continuous batching: running requests advance together, one step at a time; the rest wait in FIFO order."""

    def __init__(self, knobs: Knobs, max_running: int, spec: Optional[SpecParams]) -> None:
        self.knobs = knobs
        self.max_running = max(1, max_running)
        self.spec = spec
        self.probs = accept_probs_for(knobs, spec.max_steps) if spec else ()
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.counters = Counters()
        self._cache: dict[str, int] = {}
        self._blocks: set[int] = set()
        self._new: list[SimRequest] = []
        self.window_factor = 1.0
        """This window's step-time multiplier (window_speed_spread), drawn at each flush."""
        self._window_rng = random.Random(_seed_from(knobs.seed, "window"))
        self.dp_size = max(1, len(knobs.dp_accept_probs))
        self._dealt = 0

    def new_request(
        self, rid: str, input_ids: Optional[Sequence[int]], text: Optional[str], max_new_tokens: int, ignore_eos: bool,
        category: Optional[str] = None, setting: Optional[str] = None,
    ) -> SimRequest:
        key = prompt_key(input_ids, text)
        n_prompt = len(input_ids) if input_ids is not None else max(1, len((text or "").split()))
        # a request arriving while others run or wait joins a mixed batch
        ids, stops = output_ids(self.knobs, key, text, max_new_tokens, ignore_eos, self.spec is not None,
                                self.busy or bool(self._new))
        rng = random.Random(_seed_from(self.knobs.seed, key, "accept"))
        rank, self._dealt = self._dealt % self.dp_size, self._dealt + 1
        probs = accept_probs_for(self.knobs, self.spec.max_steps, category, rank, setting) if self.spec else ()
        cached = input_ids is not None and self.knobs.radix_cache
        blocks = prefix_blocks(input_ids) if cached and input_ids is not None else ()
        tail = tuple(input_ids[len(blocks) * PREFIX_BLOCK_TOKENS:]) if cached and input_ids is not None else None
        return SimRequest(rid=rid, prompt_tokens=n_prompt, key=key, out_ids=ids, stops_on_eos=stops, accept_rng=rng,
                          probs=probs, blocks=blocks, tail_ids=tail, dp_rank=rank)

    def submit(self, req: SimRequest) -> None:
        if req.target == 0:
            req.finished = True
            return
        self.waiting.append(req)

    def abort(self, req: SimRequest) -> None:
        if req in self.waiting:
            self.waiting.remove(req)
        elif req in self.running:
            self.running.remove(req)
        req.finished = True

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def plan_step(self) -> Optional[float]:
        """Admit waiting requests; return the next step's model time in ms, or None when idle."""
        while self.waiting and len(self.running) + len(self._new) < self.max_running:
            req = self.waiting.popleft()
            if self.knobs.radix_cache:
                req.cached_tokens = self._cached_tokens(req)
            self._new.append(req)
        if not self.running and not self._new:
            return None
        prefill = sum(r.prompt_tokens - r.cached_tokens for r in self._new if not r.prefilled)
        return step_time_ms(self.knobs, len(self.running), prefill, self.step_spec()) * self.window_factor

    def step_spec(self) -> Optional[SpecParams]:
        """This step's speculative depth: fixed, or (adaptive) the running batch's bucket's. Depth 0 is SGLang's
        trivial verify (eagle_worker_v2 `_build_trivial_verify_input`): a plain decode's cost, still one verify step
        per request (spec_verify_ct counts it, nothing drafted)."""
        return None if self.spec is None else self.spec.at_batch(len(self.running))

    def _cached_tokens(self, req: SimRequest) -> int:
        """A repeated prompt is all cached but its last token (which is computed again, as SGLang does); otherwise
        the leading blocks an earlier prompt's prefill put in the cache."""
        if req.key in self._cache:
            return max(0, req.prompt_tokens - 1)
        hit = 0
        for h in req.blocks:
            if h not in self._blocks:
                break
            hit += PREFIX_BLOCK_TOKENS
        return min(hit, max(0, req.prompt_tokens - 1))

    def commit_step(self) -> list[SimRequest]:
        """Apply the planned step; return every request that got tokens (finished ones leave the batch)."""
        touched: list[SimRequest] = []
        c = self.counters
        gen = 0
        spec = self.step_spec()
        for req in self.running:
            if spec is not None:
                acc = draw_accepted(req.accept_rng, req.probs[:spec.num_steps])
                n = min(1 + acc, req.target - req.generated)
                req.spec_verify_ct += 1
                # SGLang counts every accepted draft, also those cut off by max_new_tokens
                req.spec_num_correct_drafts += acc
                hist = req.spec_correct_drafts_histogram
                if len(hist) <= acc:
                    hist.extend([0] * (acc + 1 - len(hist)))
                hist[acc] += 1
                req.spec_num_proposed_drafts += spec.num_draft_tokens - 1
                c.spec_accept_tokens += n
                c.spec_forward_ct += 1
                c.rank_accept_tokens[req.dp_rank] = c.rank_accept_tokens.get(req.dp_rank, 0) + n
                c.rank_forward_ct[req.dp_rank] = c.rank_forward_ct.get(req.dp_rank, 0) + 1
                c.spec_verify_calls_total += 1
                c.interval_verify += 1
                c.interval_accept_tokens += n
            else:
                n = 1
            req.generated += n
            gen += n
            touched.append(req)
        for req in self._new:
            req.admitted = True
            req.generated = 1
            gen += 1
            c.prompt_tokens_total += req.prompt_tokens
            c.num_requests_total += 1
            if self.knobs.radix_cache:
                if len(self._cache) > 100_000 or len(self._blocks) > 2_000_000:
                    self._cache.clear()
                    self._blocks.clear()
                self._cache[req.key] = req.prompt_tokens
                self._blocks.update(req.blocks)
            touched.append(req)
        self.running.extend(self._new)
        self._new = []
        c.generation_tokens_total += gen
        c.interval_tokens += gen
        c.interval_steps += 1
        if c.interval_steps >= self.knobs.decode_log_interval:
            if c.interval_verify:
                c.last_interval_accept_length = c.interval_accept_tokens / c.interval_verify
            c.interval_steps = c.interval_verify = c.interval_accept_tokens = 0
        still: list[SimRequest] = []
        for req in self.running:
            if req.generated >= req.target:
                req.finished = True
                if req.tail_ids is not None:
                    # all but the last generated token, whose KV was never computed: real SGLang 0.5.23 on the CPU
                    # served a session's next turn 16 + 8 - 1 = 23 cached tokens after a 16-token prompt and an
                    # 8-token answer (tests/sglang_cpu/test_pipeline.py)
                    answer = tuple(req.out_ids[:max(0, req.generated - 1)])
                    self._blocks.update(prefix_blocks(req.tail_ids + answer, req.blocks[-1] if req.blocks else 0))
            else:
                still.append(req)
        self.running = still
        return touched

    def flush(self) -> None:
        """Drop the prefix cache and reset the speculative counters (SGLang's /flush_cache)."""
        self._cache.clear()
        self._blocks.clear()
        c = self.counters
        c.spec_accept_tokens = c.spec_forward_ct = 0
        c.rank_accept_tokens.clear()
        c.rank_forward_ct.clear()
        c.interval_verify = c.interval_accept_tokens = 0
        c.last_interval_accept_length = None
        if self.knobs.window_speed_spread:
            self.window_factor = 1.0 + self.knobs.window_speed_spread * (2.0 * self._window_rng.random() - 1.0)

    def avg_spec_accept_length(self, dp_rank: Optional[int] = None) -> Optional[float]:
        """Accepted tokens per verify step since the last flush, over every rank or over one DP rank's requests."""
        c = self.counters
        tokens, steps = ((c.spec_accept_tokens, c.spec_forward_ct) if dp_rank is None else
                         (c.rank_accept_tokens.get(dp_rank, 0), c.rank_forward_ct.get(dp_rank, 0)))
        if self.spec is None or steps == 0:
            return None
        return tokens / steps

    def tokens_in_use(self) -> int:
        return sum(r.prompt_tokens + r.generated for r in self.running)


def effective_max_running_requests(requested: Optional[int], knobs: "Knobs") -> int:
    """The scheduler's cap on running requests as SGLang 0.5.23 resolves it for one DP rank
    (sglang/srt/mem_cache/kv_cache_configurator.py `resolve_max_num_reqs`): explicit → min(requested, capacity // 2);
    unset (no speculative decoding) → min(clamp(capacity / context_len · 512, 2048, 4096), capacity // 2), where
    capacity is the KV pool in tokens. Reported as internal_states[0].effective_max_running_requests_per_dp while
    the top-level max_running_requests stays None (seen for real: 2048 with an 8192-token pool)."""
    capacity = knobs.max_total_num_tokens
    if requested is not None:
        return max(1, min(requested, capacity // 2))
    estimated = max(min(int(capacity / knobs.context_length * 512), 4096), 2048)
    return max(1, min(estimated, capacity // 2))
