"""The numeric limits an experiment's fields are held to, each with the fact of its domain that sets it.

Every int or float field of the spec models (the modules of cluster/config/, the simulator's Knobs in
cluster/config/sim_knobs.py included) has a lower and an upper bound; tests/unit/config/test_numeric_bounds.py walks the models and
fails on any field without both. A bound is the domain's, not a taste: where it is a sanity ceiling rather than a
hard limit, its docstring says so and why nothing real comes near it.
"""

from __future__ import annotations

PORT_MIN, PORT_MAX = 1, 65535
"""TCP port range (16-bit port numbers; 0 means "pick one", which a fixed port cannot)."""

MAX_GPUS_PER_NODE = 64
"""A tensor-parallel group and a node: no single machine exposes more than 64 GPUs to one OS (HGX boards hold 8,
the largest shared-memory boxes 64); a TP group must fit on one node."""

MAX_CONCURRENCY = 65536
"""Requests kept in flight: each is one TCP connection from the load client to one server address, and a client
address has at most 65536 ports toward one server port (the 16-bit port space); a 10^12 concurrency can never run."""

MAX_REQUEST_RATE = 1_000_000.0
"""Requests/s of an open loop: 1 µs between sends, below what one event loop's timers can pace (and orders of
magnitude past any LLM server's throughput)."""

MAX_TOKENS = 1_000_000
"""Token counts (prompt, output, prefix, lengths): the longest context of current models is about 1M tokens
(Qwen3.5 with YaRN extends 262,144 to ~1M); preflight then checks the model's own context length."""

MAX_VOCAB = 1 << 24
"""A vocabulary size: the largest released tokenizers hold ~262k ids; 2^24 leaves room and still catches a
mistyped exponent (preflight checks the checkpoint's own vocab_size)."""

MAX_REQUESTS = 10_000_000
"""Requests in one measured window or one session: ten million, days of traffic even at 100 req/s."""

MAX_WARMUP_REQUESTS = 100_000
"""Requests sent before a window: warming caches and CUDA graphs takes a handful; past this it is a window."""

MAX_SEED = 2**63 - 1
"""Seeds are stored in int64 columns (runs table) and fed to numpy/random, which take any non-negative int64."""

MAX_TIMEOUT_S = 86_400.0
"""Timeouts and waits: one day. A server that is not healthy, or a request that has not ended, after a day has
failed; a larger value only hides a hang."""

MAX_WINDOW_S = MAX_TIMEOUT_S
"""Seconds an open loop may take to send one window's requests (num_requests / request_rate): one day, the longest
wait the spec admits anywhere. A rate slower than that (one request per 31 years is a valid positive float) leaves
the server idle between requests, so the window measures single-request latency with a wall-clock cost no run can
pay; the bound is on the window, not the rate, because 100 requests at 0.01 req/s (~3 h) is a slow but real soak."""

MAX_LATENCY_MS = MAX_TIMEOUT_S * 1000
"""Latency limits (SLOs, client lag): a request cannot take longer than the longest request timeout."""

MAX_TEMPERATURE = 2.0
"""Sampling temperature: the OpenAI API's range (0-2), which the completions and chat endpoints follow."""

MAX_REPEATS = 1000
"""Repeats of a load point: intervals narrow as 1/sqrt(n); 1000 is already a ~3% width of 30 repeats'."""

MAX_DRAFT_STEPS = 16
"""Speculative draft steps and top-k: SGLang's EAGLE drafters are run and tested at single-digit depths; 16 is
past any published configuration, and num_draft_tokens grows with their product."""

MAX_DRAFT_TOKENS = MAX_DRAFT_STEPS * MAX_DRAFT_STEPS + 1
"""Tokens verified per step: at most steps x topk + 1 (the tree's size, the root included)."""

MAX_ACTORS_PER_SERVER = 64
"""Load actors for one server: one CPU core each, and a node has at most a few dozen cores to spare."""

MAX_BATCH_SIZE = 65536
"""A Triton MoE tuning batch size (tokens per fused-MoE call): SGLang's default list ends at 4096; a
chunked-prefill step holds at most tens of thousands of tokens."""

MAX_SEARCH_CONFIGS = 1_000_000
"""Configs sampled per batch size by the Triton MoE search: the full search space is a few thousand."""

MAX_TEMPLATE_INT = 2**53
"""An integer template variable: sent as JSON to the chat API, where above 2^53 a parser reading numbers as
doubles (JavaScript's, many others) changes it."""

MAX_TELEMETRY_HZ = 100.0
"""Telemetry samples/s: NVML refreshes its counters every ~10 ms or slower."""

MAX_GAMMA_CV = 100.0
"""Coefficient of variation of gamma gaps: past 100 one gap holds nearly the whole window."""

MAX_READ_BATCH_MS = 5.0
"""Read batching of the load client: must stay well under a server's inter-token latency (milliseconds)."""

MAX_SESSION_TURNS = 64
"""Turns per session: each turn's prompt holds every earlier turn, which outgrows any context past ~64."""

MAX_THINK_TIME_S = 3600.0
"""A user's pause between turns: an hour; past that it is a new session."""

MAX_PREFIX_GROUPS = 100_000
"""Distinct shared prefixes: more than any prefix cache holds; past this every request is a miss anyway."""

MAX_PROFILE_STEPS = 1000
"""Forward steps the torch profiler records: a trace of 1000 steps is already hundreds of MB."""

MAX_PROFILE_ARCHIVE_BYTES = 16 * 1024**3
"""The archived profile: 16 GiB, past what a results root should hold for one variant."""

MAX_GATE_TOKENS = 256
"""Tokens of a correctness-gate answer: the gate's longest prompt budget (cluster/analysis/correctness.py)."""
