"""The model's own chat template applied to a conversation prompt's turns, as Hugging Face renders it server-side.

SGLang's and vLLM's chat endpoints render `chat_template.jinja` (or `tokenizer_config.json`'s `chat_template`)
with jinja2 in a sandbox, `add_generation_prompt=True`, the tokenizer's `bos_token`/`eos_token` and the request's
`chat_template_kwargs`, then tokenize the result without adding special tokens again. Rendering the same way here
lets the native /generate path send the tokens the chat endpoint would have sent to the model.
Both files are read through cluster/input_files.py (regular files only, bounded, BOM dropped, JSON depth and digit
limits); a template that fails in any way while it compiles or renders is a ChatTemplateError naming its file.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass
from functools import cached_property
from datetime import datetime
from typing import Any, Mapping, NoReturn, Sequence, Union

from cluster.engines.base import ChatTurn
from cluster.errors import PromptSourceError
from cluster.input_files import parse_json, read_input_text

TEMPLATE_FILE = "chat_template.jinja"
CONFIG_FILE = "tokenizer_config.json"
CONFIG_LIMIT_BYTES = 16 * 1024 * 1024
"""tokenizer_config.json or a chat template past this is refused (real ones are well under 1 MB)."""


class ChatTemplateError(PromptSourceError):
    """No usable chat template, or one that fails to render: the message names the file and what was expected."""


def _token(v: Any) -> str:
    """bos_token / eos_token as tokenizer_config.json writes them: a string, or an added-token object."""
    if isinstance(v, dict):
        return str(v.get("content", ""))
    return "" if v is None else str(v)


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
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> NoReturn:
            raise TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False: json.dumps(
            x, indent=indent, ensure_ascii=ensure_ascii)
        env.globals.update(raise_exception=raise_exception,
                           strftime_now=lambda fmt: datetime.now().strftime(fmt))
        try:
            return env.from_string(self.template)
        except (TemplateError, RecursionError, MemoryError, ValueError, TypeError) as e:
            raise ChatTemplateError(f"{self.source}: the chat template does not compile: {e}",
                                    file=str(self.source), expected="a jinja2 chat template") from None

    def render(self, turns: Sequence[ChatTurn], kwargs: Mapping[str, Union[bool, int, float, str]]) -> str:
        """The prompt text: the turns as messages, with the generation prompt, and `kwargs` as template variables."""
        from jinja2 import TemplateError

        template = self._compiled
        try:
            return str(template.render(
                messages=[{"role": t.role, "content": t.content} for t in turns], add_generation_prompt=True,
                bos_token=self.bos_token, eos_token=self.eos_token, **dict(kwargs)))
        except TemplateError as e:
            raise ChatTemplateError(f"{self.source}: the chat template fails to render a prompt: {e}",
                                    file=str(self.source), expected="a jinja2 chat template") from None
        except Exception as e:  # the template is the user's code: any error in it is theirs (TypeError, ...)
            raise ChatTemplateError(f"{self.source}: the chat template fails to render a prompt: "
                                    f"{type(e).__name__}: {e}", file=str(self.source),
                                    expected="a jinja2 chat template that renders the prompt's messages") from None


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
    if isinstance(tpl, list):
        named = {str(t.get("name")): t.get("template") for t in tpl if isinstance(t, dict)}
        tpl = named.get("default")
    if not isinstance(tpl, str) or not tpl.strip():
        raise ChatTemplateError(
            f"{tokenizer_dir}: no chat template ({TEMPLATE_FILE}, or `chat_template` in {CONFIG_FILE}); "
            "prompts.chat_template needs the model's own — set prompts.tokenizer to a directory that has one",
            file=str(cfg_path), field="chat_template", expected="a chat template in the tokenizer directory")
    return ChatTemplate(cfg_path, tpl, bos, eos)
