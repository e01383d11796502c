"""The model's own chat template applied to a conversation prompt's turns, as Hugging Face renders it server-side.

SGLang's and vLLM's chat endpoints render `chat_template.jinja` (or `tokenizer_config.json`'s `chat_template`)
with jinja2 in a sandbox, `add_generation_prompt=True`, the tokenizer's `bos_token`/`eos_token` and the request's
`chat_template_kwargs`, then tokenize the result without adding special tokens again. Rendering the same way here
lets the native /generate path send the tokens the chat endpoint would have sent to the model.
Both files are read through cluster/input_files.py (regular files only, bounded, BOM dropped, JSON depth and digit
limits); a template that fails in any way while it compiles or renders is a ChatTemplateError naming its file. A
render has a deadline (cluster/kernel/deadlines.py TEMPLATE_RENDER) and an output bound: the sandbox stops neither a
loop nested over 10^5-item ranges nor a macro that calls itself twice 40 levels deep, so every loop step, call and
output chunk is checked against them, and a repetition or power whose result is past the bound is refused before
it is built.
"""

from __future__ import annotations

import json
import math
import pathlib
import time
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property
from datetime import datetime
from typing import Any, Iterable, Iterator, Mapping, NoReturn, Optional, Sequence, Union

from cluster.config.prompts import TEMPLATE_OWN_VARIABLES
from cluster.engines.base import ChatTurn
from cluster.errors import PromptSourceError
from cluster.input_files import parse_json, read_input_text
from cluster.kernel.deadlines import TEMPLATE_RENDER

TEMPLATE_FILE = "chat_template.jinja"
CONFIG_FILE = "tokenizer_config.json"
CONFIG_LIMIT_BYTES = 16 * 1024 * 1024
"""tokenizer_config.json or a chat template past this is refused (real ones are well under 1 MB)."""
RENDER_LIMIT_CHARS = 32 * 1024 * 1024
"""A render longer than this is refused (a prompt of a million-token context is a few MB of text)."""
POWER_LIMIT_BITS = 1 << 20
"""A template's `a ** b` whose result would be longer than this is refused before it is computed."""
DEFAULT_TEMPLATE = "default"
"""Of named templates (tokenizer_config.json's list of {name, template}), the one a chat request renders."""
_DEADLINE_FILTER = "sglbench_deadline"
"""The filter every `{% for %}` loop's iterable is passed through (added when the template compiles)."""


class ChatTemplateError(PromptSourceError):
    """No usable chat template, or one that fails to render: the message names the file and what was expected."""


def _token(v: Any) -> str:
    """bos_token / eos_token as tokenizer_config.json writes them: a string, or an added-token object."""
    if isinstance(v, dict):
        return str(v.get("content", ""))
    return "" if v is None else str(v)


class _RenderStopped(ChatTemplateError):
    """Raised inside a render that passed its deadline or output bound (`why` says which); render() names the file."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


_ENDS_AT: ContextVar[Optional[tuple[float, float]]] = ContextVar("chat_template_render_ends_at", default=None)
"""(monotonic end, deadline in s) of the render under way in this thread or task; None outside a render."""


def _check_deadline() -> None:
    ends = _ENDS_AT.get()
    if ends is not None and time.monotonic() > ends[0]:
        raise _RenderStopped(f"it did not finish rendering within its {ends[1]:g} s deadline ({TEMPLATE_RENDER.env}): "
                             "a loop or a macro that runs on and on")


def _deadline_iter(items: Iterable[Any]) -> Iterator[Any]:
    for item in items:
        _check_deadline()
        yield item


def _sized(value: Any) -> Optional[int]:
    return len(value) if isinstance(value, (str, list, tuple)) else None


def _check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse a repetition, concatenation or power whose result would be past the bounds, before it is built."""
    ints = isinstance(left, int) and isinstance(right, int)
    if operator == "**" and ints and abs(left) > 1 and right > 0 \
            and right * math.log2(abs(left)) > POWER_LIMIT_BITS:
        raise _RenderStopped(f"it computes {left} ** {right}, a number of more than {POWER_LIMIT_BITS} bits")
    size: Optional[int] = None
    if operator == "*" and isinstance(right, int) and _sized(left) is not None:
        size = (_sized(left) or 0) * right
    elif operator == "*" and isinstance(left, int) and _sized(right) is not None:
        size = (_sized(right) or 0) * left
    elif operator == "+" and _sized(left) is not None and _sized(right) is not None:
        size = (_sized(left) or 0) + (_sized(right) or 0)
    if size is not None and size > RENDER_LIMIT_CHARS:
        raise _RenderStopped(f"it builds a {size}-item value with `{operator}`, past the render bound of "
                             f"{RENDER_LIMIT_CHARS} characters")


@dataclass(frozen=True)
class ChatTemplate:
    source: pathlib.Path
    """The file the template was read from (named in every error)."""
    template: str
    bos_token: str
    eos_token: str

    @cached_property
    def _compiled(self) -> Any:
        """The template compiled once (every row of a dataset renders through it)."""
        from jinja2 import TemplateError, nodes
        from jinja2.runtime import Context
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> NoReturn:
            raise TemplateError(message)

        class BoundedEnvironment(ImmutableSandboxedEnvironment):
            """The sandbox with every call and every `*`, `**`, `+` checked against the render's bounds."""

            intercepted_binops = frozenset({"*", "**", "+"})

            def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
                _check_deadline()
                return super().call(__context, __obj, *args, **kwargs)

            def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
                _check_deadline()
                _check_binop(operator, left, right)
                return super().call_binop(context, operator, left, right)

        env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters[_DEADLINE_FILTER] = _deadline_iter
        env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False: json.dumps(
            x, indent=indent, ensure_ascii=ensure_ascii)
        env.globals.update(raise_exception=raise_exception,
                           strftime_now=lambda fmt: datetime.now().strftime(fmt))
        try:
            tree = env.parse(self.template)
            for loop in tree.find_all(nodes.For):  # every loop step checks the deadline (a list loop calls nothing)
                loop.iter = nodes.Filter(loop.iter, _DEADLINE_FILTER, [], [], None, None, lineno=loop.lineno)
            return env.from_string(tree)
        except (TemplateError, RecursionError, MemoryError, ValueError, TypeError) as e:
            raise ChatTemplateError(f"{self.source}: the chat template does not compile: {e}",
                                    file=str(self.source), expected="a jinja2 chat template") from None

    def render(self, turns: Sequence[ChatTurn], kwargs: Mapping[str, Union[bool, int, float, str]],
               deadline_s: Optional[float] = None) -> str:
        """The prompt text: the turns as messages, with the generation prompt, and `kwargs` as template variables
        (as Hugging Face's, they may set bos_token and eos_token). Refused past `deadline_s` (default: the declared
        TEMPLATE_RENDER deadline) or RENDER_LIMIT_CHARS, and when it renders no text."""
        from jinja2 import TemplateError

        clash = sorted(set(kwargs) & set(TEMPLATE_OWN_VARIABLES))
        if clash:
            raise ChatTemplateError(f"{self.source}: chat_template_kwargs sets {clash[0]!r}, which the renderer sets "
                                    "itself", file=str(self.source), field=f"chat_template_kwargs.{clash[0]}",
                                    expected=f"kwargs other than {', '.join(TEMPLATE_OWN_VARIABLES)}")
        template = self._compiled
        limit_s = TEMPLATE_RENDER.seconds() if deadline_s is None else deadline_s
        variables: dict[str, Any] = {"bos_token": self.bos_token, "eos_token": self.eos_token, **dict(kwargs),
                                     "messages": [{"role": t.role, "content": t.content} for t in turns],
                                     "add_generation_prompt": True}
        token = _ENDS_AT.set((time.monotonic() + limit_s, limit_s))
        try:
            parts: list[str] = []
            size = 0
            for chunk in template.generate(**variables):
                size += len(chunk)
                if size > RENDER_LIMIT_CHARS:
                    raise _RenderStopped(f"its render passed {RENDER_LIMIT_CHARS} characters")
                parts.append(chunk)
                _check_deadline()
            text = "".join(parts)
        except _RenderStopped as e:
            raise self._error(f"is refused: {e.why}", "a chat template that renders a prompt in bounded time "
                                                   "and size") from None
        except TemplateError as e:
            raise self._error(f"fails to render a prompt: {e}", "a jinja2 chat template") from None
        except Exception as e:  # the template is the user's code: any error in it is theirs (TypeError, ...)
            raise self._error(f"fails to render a prompt: {type(e).__name__}: {e}",
                              "a jinja2 chat template that renders the prompt's messages") from None
        finally:
            _ENDS_AT.reset(token)
        if not text.strip():
            raise self._error(f"renders an empty prompt for {len(turns)} message(s) (does it read `messages`?)",
                              "a chat template whose render holds the messages")
        return text

    def _error(self, what: str, expected: str) -> ChatTemplateError:
        return ChatTemplateError(f"{self.source}: the chat template {what}", file=str(self.source),
                                 expected=expected)


def _present(path: pathlib.Path) -> bool:
    """Whether the file is there to read: anything at the path (a FIFO, a dangling or looping symlink) is, so
    reading it names what is wrong instead of looking elsewhere."""
    try:
        path.lstat()
    except (OSError, ValueError):
        return False
    return True


def load_chat_template(tokenizer_dir: pathlib.Path) -> ChatTemplate:
    """The template of a tokenizer directory: chat_template.jinja, else tokenizer_config.json's `chat_template`
    (a string, or a list of {name, template} of which the one named 'default')."""
    cfg_path = tokenizer_dir / CONFIG_FILE
    cfg: dict[str, Any] = {}
    if _present(cfg_path):
        loaded = parse_json(read_input_text(cfg_path, ChatTemplateError, CONFIG_FILE, limit_bytes=CONFIG_LIMIT_BYTES),
                            cfg_path, ChatTemplateError, CONFIG_FILE, expected="a JSON object", allow_nan=False)
        if not isinstance(loaded, dict):
            raise ChatTemplateError(f"{cfg_path}: expected a JSON object, got {type(loaded).__name__}",
                                    file=str(cfg_path), expected="a JSON object")
        cfg = loaded
    bos, eos = _token(cfg.get("bos_token")), _token(cfg.get("eos_token"))
    jinja = tokenizer_dir / TEMPLATE_FILE
    if _present(jinja):
        return ChatTemplate(jinja, read_input_text(jinja, ChatTemplateError, TEMPLATE_FILE,
                                                   limit_bytes=CONFIG_LIMIT_BYTES), bos, eos)
    tpl = cfg.get("chat_template")
    if isinstance(tpl, (list, dict)):
        tpl = _default_of_named(tpl, cfg_path)
    if not isinstance(tpl, str) or not tpl.strip():
        raise ChatTemplateError(
            f"{tokenizer_dir}: no chat template ({TEMPLATE_FILE}, or `chat_template` in {CONFIG_FILE}); "
            "prompts.chat_template needs the model's own — set prompts.tokenizer to a directory that has one",
            file=str(cfg_path), field="chat_template", expected="a chat template in the tokenizer directory")
    return ChatTemplate(cfg_path, tpl, bos, eos)


def _default_of_named(named: Union[list[Any], dict[str, Any]], cfg_path: pathlib.Path) -> Any:
    """The `default` template of named ones: a list of {name, template} (as Hugging Face saves them) or a mapping of
    name to template; refused, naming the names there are, when none is called `default` (a chat request, like
    Hugging Face's apply_chat_template, renders that one)."""
    if isinstance(named, dict):
        templates = {str(k): v for k, v in named.items()}
    else:
        templates = {str(t.get("name")): t.get("template") for t in named if isinstance(t, dict)}
    if DEFAULT_TEMPLATE not in templates:
        listed = ", ".join(repr(n) for n in sorted(templates)[:8]) or "none"
        raise ChatTemplateError(
            f"{cfg_path}: `chat_template` holds named templates ({listed}) but none named {DEFAULT_TEMPLATE!r}, the "
            "one a chat request renders", file=str(cfg_path), field="chat_template",
            expected=f"a template named {DEFAULT_TEMPLATE!r}")
    return templates[DEFAULT_TEMPLATE]
