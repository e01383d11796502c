"""The simulator's generation endpoints: /generate and the OpenAI completions, read into simulated requests."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any, Optional, Union

from aiohttp import web

from cluster.engines.base import CATEGORY_HEADER, TEMPLATE_SETTING_HEADER
from cluster.sim.disagg import PdError, Ticket
from cluster.sim.lifecycle import SimServer, error_response
from cluster.sim.model import SimRequest

NATIVE_MAX_NEW_TOKENS_DEFAULT = 128
COMPLETIONS_MAX_TOKENS_DEFAULT = 16


class InferenceEndpoints:
    """/generate, /v1/completions and /v1/chat/completions: each request body read, submitted and answered."""

    def __init__(self, server: SimServer) -> None:
        self.server = server

    async def generate(self, request: web.Request) -> web.StreamResponse:
        t_recv_ns = time.monotonic_ns()
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("request body must be a JSON object")
            sp = body.get("sampling_params") or {}
            max_new = int(sp.get("max_new_tokens", NATIVE_MAX_NEW_TOKENS_DEFAULT))
            ignore_eos = bool(sp.get("ignore_eos", False))
            text, ids = body.get("text"), body.get("input_ids")
            if text is None and ids is None:
                raise ValueError("either text or input_ids should be provided")
        except (ValueError, TypeError) as e:
            return error_response(400, str(e))
        stream = bool(body.get("stream", False))
        if max_new < 0:
            # SGLang's SamplingParams.verify raises a ValueError: a 400 body, or an error event on a stream
            return await self._request_error(request, f"max_new_tokens must be at least 0, got {max_new}.", stream)
        batch = isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list))
        ticket = await self._pd_enter(request, body, stream, bool(batch))
        if isinstance(ticket, web.StreamResponse):
            return ticket
        if ticket is not None and ticket.role.prefill:
            max_new = 1  # a prefill server computes the first token only (the decode server makes the rest)
        if batch:
            if stream:
                return error_response(400, "the simulated engine streams only single prompts")
            prompts: list[tuple[Optional[list[int]], Optional[str]]] = (
                [(None, t) for t in text] if isinstance(text, list) else [(list(i), None) for i in ids or []])
            return web.json_response([await self.server.generate_one(p_ids, p_text, max_new, ignore_eos, None)
                                      for p_ids, p_text in prompts])
        if stream and self.server.pacer is not None and ticket is None:
            return await self.server.stream_fixed(request, body.get("rid"), list(ids) if ids is not None else None,
                                                  text, max_new, ignore_eos, t_recv_ns)
        req, ev = self.server.submit(list(ids) if ids is not None else None, text, max_new, ignore_eos,
                                     body.get("rid"), request.headers.get(CATEGORY_HEADER),
                                     request.headers.get(TEMPLATE_SETTING_HEADER))
        failed = await self._pd_pass(request, ticket, req, ev, stream)
        if failed is not None:
            return failed
        return await self.server.respond(request, req, ev, self.server.chunk_writer(req, "native"), stream)

    async def _pd_enter(self, request: web.Request, body: dict[str, Any], stream: bool,
                        batch: bool = False) -> Union[Ticket, web.StreamResponse, None]:
        """A PD server's part before the scheduler: the request's bootstrap fields read, then (decode) the handshake
        and the KV transfer, or (prefill) the wait for the decode's handshake. An error response when refused."""
        pd = self.server.pd
        if pd is None:
            return None
        try:
            if batch:
                raise PdError(400, "the simulated PD server takes single prompts only")
            ticket = pd.ticket(body, str(body.get("rid") or uuid.uuid4().hex))
            await ticket.before_submit()
        except PdError as e:
            return await self._request_error(request, e.message, stream, e.status)
        return ticket

    async def _pd_pass(self, request: web.Request, ticket: Optional[Ticket], req: SimRequest, ev: asyncio.Event,
                       stream: bool) -> Optional[web.StreamResponse]:
        """A submitted PD request: its first token timed; a prefill's KV handed off once its forward finished."""
        if ticket is None:
            return None
        req.prefilled = not ticket.role.prefill
        req.on_progress = ticket.watch(req.on_progress, lambda: req.generated)
        if not ticket.role.prefill:
            return None
        await self.server.wait_finished(req, ev)
        try:
            await ticket.hand_off(req.prompt_tokens)
        except PdError as e:
            return await self._request_error(request, e.message, stream, e.status)
        ev.set()  # respond() then writes the finished request at once
        return None

    async def _request_error(self, request: web.Request, message: str, stream: bool,
                             status: int = 400) -> web.StreamResponse:
        """A ValueError inside SGLang's /generate: 400 {"error": {"message"}}; when streaming, 200 with one error
        event (message, type, code, retryable) and [DONE] (http_server.serve_generate_request)."""
        if not stream:
            return web.json_response({"error": {"message": message}}, status=status)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        err = {"error": {"message": message, "type": "invalid_request_error", "code": status, "retryable": False}}
        await resp.write(b"data: " + json.dumps(err, separators=(",", ":")).encode() + b"\n\ndata: [DONE]\n\n")
        return resp

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=True)

    async def _openai(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("request body must be a JSON object")
            ids: Optional[list[int]] = None
            text: Optional[str] = None
            if chat:
                msgs = body.get("messages")
                if not isinstance(msgs, list) or not msgs:
                    raise ValueError("messages must be a non-empty list")
                text = "\n".join(_content_text(m.get("content")) for m in msgs if isinstance(m, dict))
                default_max = NATIVE_MAX_NEW_TOKENS_DEFAULT
            else:
                prompt = body.get("prompt")
                if isinstance(prompt, str):
                    text = prompt
                elif isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
                    ids = prompt
                else:
                    raise ValueError("prompt must be a string or a list of token ids")
                default_max = COMPLETIONS_MAX_TOKENS_DEFAULT
            max_new = body.get("max_completion_tokens") or body.get("max_tokens") or default_max
            max_new = int(max_new)
        except (ValueError, TypeError, AttributeError) as e:
            return error_response(400, str(e))
        ticket = await self._pd_enter(request, body, bool(body.get("stream")))
        if isinstance(ticket, web.StreamResponse):
            return ticket
        if ticket is not None and ticket.role.prefill:
            max_new = 1
        req, ev = self.server.submit(ids, text, max_new, bool(body.get("ignore_eos", False)), body.get("rid"),
                                     request.headers.get(CATEGORY_HEADER),
                                     request.headers.get(TEMPLATE_SETTING_HEADER))
        failed = await self._pd_pass(request, ticket, req, ev, bool(body.get("stream")))
        if failed is not None:
            return failed
        opts = body.get("stream_options") or {}
        writer = self.server.chunk_writer(
            req, "chat" if chat else "completions",
            model=str(body.get("model") or self.server.args["served_model_name"]),
            include_usage=bool(opts.get("include_usage")), continuous_usage=bool(opts.get("continuous_usage_stats")),
            spec_details=bool(body.get("return_spec_tokens_details")))
        return await self.server.respond(request, req, ev, writer, bool(body.get("stream")))


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""
