"""A throwaway engine adapter: the one module a new engine writes (tests/unit/engines/test_new_engine.py registers
it and runs it through validate and plan; no other file of the project names it)."""

from __future__ import annotations

from typing import Optional

from cluster.config.server import ArgValue
from cluster.engines.base import Engine, HttpRequest, StreamParser, StreamRequest, category_headers
from cluster.engines.sglang_dialect import encode_request, render_args, sglang_request_body
from cluster.engines.streams import OpenAIStreamParser
from cluster.kernel.runs import ResolvedVariant


class ToyEngine(Engine):
    name = "toy"
    label = "Toy server"
    module = "toy_server.serve"
    flush_path = None
    cap_flags = frozenset({"max-batch"})
    scraped_metrics = ("toy:requests_running", "toy:requests_waiting")
    packages = ("toy-server",)
    checkpoint_probed = True

    def server_args(self, variant: ResolvedVariant, host: str, port: int, version: Optional[str]) -> list[str]:
        args: dict[str, ArgValue] = {k.replace("_", "-"): v for k, v in variant.args.items()}
        return ["--model", variant.model_path, "--host", host, "--port", str(port),
                "--shards", str(variant.tp)] + render_args(args)

    def build_request(self, request: StreamRequest) -> HttpRequest:
        path, body = sglang_request_body(request)  # an OpenAI-compatible server
        body.pop("return_spec_tokens_details", None)
        return encode_request(path, body, category_headers(request.prompt))

    def new_parser(self, api: str, keep_text: bool = False) -> StreamParser:
        return OpenAIStreamParser(keep_text)
