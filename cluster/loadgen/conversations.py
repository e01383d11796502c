"""Conversation datasets: ShareGPT (JSON array or JSONL of `conversations: [{from, value}]`) and OpenAI-style
`messages` JSONL, read into prompts with a category; malformed rows are errors naming file:line, filtered rows counted.

A row's prompt is its turns before the first assistant turn (a system turn and the first user turn, or several
user turns), its reference answer that first assistant turn — the convention of SGLang's and vLLM's
bench_serving ShareGPT loaders, which take turn 0 as the prompt and turn 1 as the completion. With
`chat_template: true` the prompt text is the model's own chat template rendered over the turns
(cluster/loadgen/chat_template.py), sent as its tokens; without, the turns' contents joined by a blank line. The
chat API always sends the turns as messages (with the workload's chat_template_kwargs).
Rows are never skipped silently: a row that cannot be read is a ConversationError (file:line, what was expected), a
row left out (no user text, no reference answer where one is needed, a category not selected, longer than
`max_input_tokens`) is counted by reason in `Selection.filtered`, which validate/plan print.
A row is identified by its 0-based ordinal in the file (`ConversationRow.row`, `Prompt.source_row`), never by its
line: a compact JSON array holds every row on line 1. The line is only for messages.
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

import numpy as np

from cluster.engines.base import ChatTurn, Prompt
from cluster.errors import PromptSourceError
from cluster.loadgen.source_files import SourceRecord, json_records, read_source_text, row_error, shown
from cluster.loadgen.lengths import OUTPUT_STREAM, draw_lengths, length_rng
from cluster.loadgen.sessions import Render, session_count
from cluster.config.workload import LengthDist, WorkloadSpec
from cluster.config.prompts import ConversationPrompts

SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bard": "assistant",
                  "bing": "assistant", "model": "assistant", "assistant": "assistant", "system": "system"}
"""ShareGPT `from` values (as the public ShareGPT dumps spell them) → OpenAI roles."""
MESSAGE_ROLES = ("system", "user", "assistant")
_CATEGORY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

class ConversationError(PromptSourceError):
    """A conversation dataset that cannot be read, or a row that cannot: the message names file:line, the field and
    what was expected."""


Counter = Callable[[str], int]
"""Token count of a text (the workload's tokenizer)."""
Encoder = Callable[[str], list[int]]
Renderer = Callable[[tuple[ChatTurn, ...]], str]
"""A prompt's turns → the text sent (the model's chat template)."""


@dataclass(frozen=True)
class ConversationRow:
    row: int
    """0-based ordinal of the row in the file: its identity (selections and prompts are keyed by it)."""
    line: int
    """Line of the file where the row starts (file:line in every message about it); not unique."""
    category: Optional[str]
    turns: tuple[ChatTurn, ...]
    """The prompt: the turns before the first assistant turn."""
    reference: Optional[str]
    """The first assistant turn (the reference answer), None when the row has none."""
    followups: tuple[str, ...] = ()
    """The user text after each later assistant turn (consecutive user turns joined): a session's later turns."""

    @property
    def text(self) -> str:
        return "\n\n".join(t.content for t in self.turns)


@dataclass
class Selection:
    """The rows a workload uses, and how many of the file's rows were left out, by reason."""

    path: pathlib.Path
    rows_read: int
    rows: list[ConversationRow]
    filtered: dict[str, int] = field(default_factory=dict)
    input_tokens: dict[int, int] = field(default_factory=dict)
    """Row ordinal → prompt tokens, when a tokenizer counted them."""
    output_tokens: dict[int, int] = field(default_factory=dict)
    """Row ordinal → reference answer tokens, when a tokenizer counted them."""
    texts: dict[int, str] = field(default_factory=dict)
    """Row ordinal → the prompt text sent, when a chat template rendered it (else the row's joined turns)."""

    def summary(self) -> str:
        """'120 rows read, 118 used, 2 filtered (1 empty, 1 too long)'."""
        n_out = sum(self.filtered.values())
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(self.filtered.items()))
        cats: dict[str, int] = {}
        for r in self.rows:
            cats[r.category or "-"] = cats.get(r.category or "-", 0) + 1
        per = ", ".join(f"{c} {n}" for c, n in sorted(cats.items()))
        distinct = len({self.texts.get(r.row, r.text) for r in self.rows})
        same = (f"; only {distinct} distinct first prompt{'s' if distinct != 1 else ''} among the {len(self.rows)} "
                "used rows, so a run sends at most that many different prompts") if distinct < len(self.rows) else ""
        return (f"{self.path}: {self.rows_read} rows read, {len(self.rows)} used"
                + (f" ({per})" if per else "") + (f", {n_out} filtered ({why})" if n_out else ", none filtered")
                + same)


def _error(path: pathlib.Path, rec: SourceRecord, message: str, fld: Optional[str] = None) -> ConversationError:
    return row_error(ConversationError, path, rec.line, rec.row, message, fld, message)


def _objects(path: pathlib.Path) -> list[SourceRecord]:
    """The file's rows: a JSON array's elements, or the non-blank lines of a JSONL file."""
    raw = read_source_text(path, ConversationError, "dataset file")
    return json_records(path, raw, ConversationError, "a JSON array of objects, or one JSON object per line")


def _turns(path: pathlib.Path, rec: SourceRecord, obj: dict[str, Any], source: str) -> list[ChatTurn]:
    key, role_key, text_key = (("conversations", "from", "value") if source == "sharegpt"
                               else ("messages", "role", "content"))
    turns = obj.get(key)
    if not isinstance(turns, list):
        raise _error(path, rec, f"expected a list field {key!r} (got "
                     f"{type(turns).__name__ if key in obj else 'no such key'})", key)
    out: list[ChatTurn] = []
    for j, t in enumerate(turns):
        where = f"{key}[{j}]"
        if not isinstance(t, dict):
            raise _error(path, rec, f"{where}: expected an object with {role_key!r} and {text_key!r}", where)
        role, text = t.get(role_key), t.get(text_key)
        roles = SHAREGPT_ROLES if source == "sharegpt" else {r: r for r in MESSAGE_ROLES}
        if not isinstance(role, str) or role.lower() not in roles:
            raise _error(path, rec, f"{where}.{role_key}: expected one of {', '.join(sorted(roles))}, "
                         f"got {shown(role)}",
                         f"{where}.{role_key}")
        if not isinstance(text, str):
            raise _error(path, rec, f"{where}.{text_key}: expected a string, got {type(text).__name__}",
                         f"{where}.{text_key}")
        out.append(ChatTurn(roles[role.lower()], text))
    return out


def _followups(after: list[ChatTurn]) -> tuple[str, ...]:
    """The user text of each exchange after the first answer: the user turns between two assistant turns, joined."""
    out: list[str] = []
    pending: list[str] = []
    for t in after:
        if t.role == "assistant":
            if pending:
                out.append("\n\n".join(pending))
            pending = []
        elif t.role == "user" and t.content.strip():
            pending.append(t.content)
    if pending:
        out.append("\n\n".join(pending))
    return tuple(out)


def load_conversations(path: pathlib.Path, src: ConversationPrompts) -> list[ConversationRow]:
    """Every row of a conversation dataset; ConversationError (file:line, field, expectation) at the first malformed one."""
    rows: list[ConversationRow] = []
    for rec in _objects(path):
        line, obj = rec.line, rec.value
        if not isinstance(obj, dict):
            raise _error(path, rec, f"expected a JSON object per row, got {type(obj).__name__}")
        turns = _turns(path, rec, obj, src.source)
        cat = obj.get(src.category_field, src.category)
        if cat is not None and (not isinstance(cat, str) or not _CATEGORY_RE.match(cat)):
            raise _error(path, rec, f"{src.category_field}: expected a category name (1-64 letters, digits, '.', "
                         f"'_' or '-'), got {shown(cat)}", src.category_field)
        first_answer = next((k for k, t in enumerate(turns) if t.role == "assistant"), len(turns))
        prompt = tuple(turns[:first_answer])
        ref = turns[first_answer].content if first_answer < len(turns) else None
        rows.append(ConversationRow(rec.row, line, cat, prompt, ref, _followups(turns[first_answer:])))
    if not rows:
        raise ConversationError(f"{path}: no rows (expected {'ShareGPT conversations' if src.source == 'sharegpt' else 'messages'})",
                           file=str(path))
    return rows


def select_rows(path: pathlib.Path, rows: list[ConversationRow], workload: WorkloadSpec,
                count: Optional[Counter], render: Optional[Renderer] = None) -> Selection:
    """The rows the workload uses; the others counted by reason. `count` (a tokenizer) is needed for
    `max_input_tokens` and `output_tokens: dataset` (the caller checks that it has one); `render` (a chat
    template) makes each prompt's text, so lengths are counted on what is sent."""
    src = workload.prompts
    assert isinstance(src, ConversationPrompts)
    sel = Selection(path, len(rows), [])

    def drop(reason: str) -> None:
        sel.filtered[reason] = sel.filtered.get(reason, 0) + 1

    for r in rows:
        if not any(t.role == "user" and t.content.strip() for t in r.turns):
            drop("empty (no user text before the first answer)")
            continue
        if src.categories is not None and r.category not in src.categories:
            drop("category not selected")
            continue
        if workload.sessions is not None and len(r.followups) < workload.sessions.turns - 1:
            drop(f"fewer than {workload.sessions.turns} user turns (sessions.turns)")
            continue
        if workload.output_tokens == "dataset":
            if r.reference is None or not r.reference.strip():
                drop("no reference answer (output_tokens: dataset)")
                continue
        text = r.text
        if render is not None:
            text = sel.texts[r.row] = render(r.turns)
        if count is not None:
            n_in = count(text)
            if n_in == 0:  # e.g. only characters the tokenizer drops: an empty prompt no server accepts
                drop("no tokens (the tokenizer made nothing of its text)")
                continue
            if src.max_input_tokens is not None and n_in > src.max_input_tokens:
                drop(f"longer than max_input_tokens {src.max_input_tokens}")
                continue
            sel.input_tokens[r.row] = n_in
            if workload.output_tokens == "dataset":
                assert r.reference is not None
                sel.output_tokens[r.row] = max(1, count(r.reference))
        sel.rows.append(r)
    return sel


def needs_tokenizer(workload: WorkloadSpec) -> bool:
    return workload.tokenizer_field() is not None


def conversation_prompts(sel: Selection, workload: WorkloadSpec, n: int, seed: int,
                         encode: Optional[Encoder]) -> list[Prompt]:
    """`n` prompts: a seeded permutation of the selected rows, cycled (each pass reshuffled) past their number.

    Output budgets: the workload's fixed output_tokens (max_tokens None), a seeded draw per request from its
    distribution, or each row's reference answer length (`dataset`). With `encode` the prompt is sent as token ids.
    """
    if not sel.rows:
        raise ConversationError(f"{sel.path}: every row was filtered ({sel.summary()}); nothing to send",
                           file=str(sel.path), expected="at least one usable row")
    rng = np.random.default_rng(seed)
    turns = workload.sessions.turns if workload.sessions is not None else 1
    n_rows = session_count(n, turns)  # a session takes one row for all its turns
    picked: list[ConversationRow] = []
    while len(picked) < n_rows:
        order = rng.permutation(len(sel.rows))
        picked.extend(sel.rows[int(i)] for i in order[: n_rows - len(picked)])
    out_len = workload.output_tokens
    budgets: list[Optional[int]] = [None] * n
    if isinstance(out_len, LengthDist):
        budgets = [int(x) for x in draw_lengths(out_len, n, length_rng(seed, OUTPUT_STREAM))]
    elif out_len == "dataset":
        assert turns == 1  # the spec refuses output_tokens: dataset with sessions
        budgets = [sel.output_tokens[r.row] for r in picked]
    src = workload.prompts
    assert isinstance(src, ConversationPrompts)
    kwargs = tuple(sorted(src.template_kwargs().items())) or None
    prompts: list[Prompt] = []
    cache: dict[int, Prompt] = {}  # row ordinal → its first-turn prompt, encoded once
    for i in range(n):
        r, k, budget = picked[i // turns], i % turns, budgets[i]
        if k:
            # a later session turn: only its user text; the runner prepends the history and the real answer
            text = r.followups[k - 1]
            prompts.append(Prompt(text=text, messages=(ChatTurn("user", text),), category=r.category,
                                  max_tokens=budget, chat_template_kwargs=kwargs, source_row=r.row))
            continue
        base = cache.get(r.row)
        if base is None:
            text = sel.texts.get(r.row, r.text)
            ids = tuple(encode(text)) if encode is not None else None
            base = cache[r.row] = Prompt(input_ids=ids, text=text, messages=r.turns, category=r.category,
                                         chat_template_kwargs=kwargs, source_row=r.row)
        prompts.append(replace(base, max_tokens=budget) if budget is not None else base)
    return prompts


def tokenizer_functions(tokenizer_json: pathlib.Path) -> tuple[Counter, Encoder]:
    """(count, encode) from a tokenizer.json (the `tokenizers` package; nothing is downloaded)."""
    from cluster.loadgen.text_prompts import load_tokenizer

    tok = load_tokenizer(tokenizer_json)

    def encode(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False).ids)

    return (lambda text: len(encode(text))), encode


def load_selection(workload: WorkloadSpec, base_dir: pathlib.Path,
                   model_path: str) -> tuple[Selection, Optional[Encoder]]:
    """A conversation workload's rows and its encoder (None without a tokenizer): what the load actor sends and
    what validate reports."""
    src = workload.prompts
    assert isinstance(src, ConversationPrompts)
    assert src.path is not None  # the spec requires a path
    path = src.path if pathlib.Path(src.path).is_absolute() else str(base_dir / src.path)
    path_ = pathlib.Path(path)
    rows = load_conversations(path_, src)
    count, encode, render = _text_functions(workload, base_dir, model_path)
    return select_rows(path_, rows, workload, count, render), encode


def _text_functions(workload: WorkloadSpec, base_dir: pathlib.Path,
                    model_path: str) -> tuple[Optional[Counter], Optional[Encoder], Optional[Renderer]]:
    """(count, encode, chat template) of a conversation workload; None where it needs none."""
    from cluster.loadgen.text_prompts import tokenizer_file

    src = workload.prompts
    assert isinstance(src, ConversationPrompts)
    if not needs_tokenizer(workload):
        return None, None, None
    tok = tokenizer_file(src.tokenizer, model_path, base_dir)
    count, encode = tokenizer_functions(tok)
    if not src.chat_template:
        return count, encode, None
    from cluster.loadgen.chat_template import load_chat_template

    template, kwargs = load_chat_template(tok.parent), src.template_kwargs()
    return count, encode, lambda turns: template.render(turns, kwargs)


def session_renderer(workload: WorkloadSpec, base_dir: pathlib.Path, model_path: str) -> Optional[Render]:
    """How a conversation session's later turns become the text and ids sent, as its first turns did: the chat
    template rendered over the whole conversation and tokenized, or the turns joined and tokenized; None when the
    workload sends text as written (the server tokenizes; cluster/loadgen/sessions.py joins the texts)."""
    _, encode, render = _text_functions(workload, base_dir, model_path)
    if encode is None:
        return None
    enc = encode

    def session_text(turns: tuple[ChatTurn, ...]) -> tuple[str, Optional[tuple[int, ...]]]:
        text = render(turns) if render is not None else "\n\n".join(t.content for t in turns)
        return text, tuple(enc(text))

    return session_text
