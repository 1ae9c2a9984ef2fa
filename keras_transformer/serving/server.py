"""The HTTP server of `keras-transformer serve`: OpenAI-compatible endpoints,
micro-batching and a chat page, on FastAPI (`pip install
"keras-transformer-kr[serve]"`).

    POST /v1/chat/completions   OpenAI's chat API: the last user message is the question
    POST /v1/completions        OpenAI's completions API: the prompt is the question
    POST /v1/translate          {"texts": [...]} -> {"translations": [...]}, in order
    GET  /v1/models             the one model served
    GET  /health                503 while the model loads, 200 when it is ready
    GET  /                      the chat page (static files shipped in the package)

Decoding: `temperature > 0` samples (with `top_p` and `seed`); otherwise the
request's `method` (this server's own field: greedy, beam, mmi, sample), or
the server's (`--method`, MMI beam search by default, as `chat`). Answers are
decoded to the model's longest output and cut to `max_tokens`. `stream: true`
answers with server-sent events, one chunk per answer: the decoding loop is
one compiled call that returns every token at once, so no method streams
token by token. Every error is in OpenAI's shape, `{"error": {"message",
"type", "param", "code"}}`: a 4xx for a bad request, 503 when the queue is
full, 504 after `--timeout`, 500 for a bug of ours. The server keeps no state
between requests.
"""

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Literal, Optional, Union

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from keras_transformer.errors import InputError
from keras_transformer.generation import METHODS
from keras_transformer.serving.batching import MicroBatcher, QueueFull
from keras_transformer.serving.engines import MAX_ANSWERS

STATIC = Path(__file__).parent / "static"
MAX_BODY_BYTES = 1 << 20
MAX_TEXTS = 256


class Strict(BaseModel):
    """A request body: a field it does not know is an error, not ignored."""

    model_config = ConfigDict(extra="forbid")


class Decoding(Strict):
    """The options every generating endpoint takes."""

    model: Optional[str] = None
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1, le=MAX_ANSWERS)
    seed: Optional[int] = Field(None, ge=0, lt=2**31)
    stream: bool = False
    method: Optional[Literal[METHODS]] = None
    # Accepted as OpenAI clients send them, and without effect:
    user: Optional[str] = None
    stream_options: Optional[dict] = None


class Message(Strict):
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: Union[str, list, None] = None
    name: Optional[str] = None


class ChatRequest(Decoding):
    messages: list[Message] = Field(min_length=1)


class CompletionRequest(Decoding):
    prompt: Union[str, list[str]]


class TranslateRequest(Strict):
    texts: list[str] = Field(min_length=1, max_length=MAX_TEXTS)
    method: Optional[Literal[METHODS]] = None
    temperature: Optional[float] = Field(None, ge=0, le=2)
    seed: Optional[int] = Field(None, ge=0, lt=2**31)


def error_response(status, message, param=None, kind="invalid_request_error", headers=None):
    body = {"error": {"message": message, "type": kind, "param": param, "code": None}}
    return JSONResponse(body, status_code=status, headers=headers)


def message_text(message):
    """A message's text: its string content, or the text parts of a list."""
    if isinstance(message.content, list):
        return "".join(part["text"] for part in message.content
                       if isinstance(part, dict) and part.get("type") == "text"
                       and isinstance(part.get("text"), str))
    return message.content or ""


class Server:
    """The served engine, its batcher and the readiness flag.

    Args:
        load: `() -> engine`, run in a thread at start-up (`/health` says 503
            until it returns).
        max_batch_size, max_wait_ms, max_queue: the `MicroBatcher`'s.
        timeout: float. Seconds a request may wait and decode; then 504.
    """

    def __init__(self, load, max_batch_size=64, max_wait_ms=5.0, max_queue=1024, timeout=60.0):
        self.engine = None
        self.error = None
        self.timeout = timeout
        self.batcher = MicroBatcher(self._run, max_batch_size, max_wait_ms, max_queue)
        self.loading = threading.Thread(target=self._load, args=(load,), daemon=True)

    def _load(self, load):
        try:
            self.engine = load()
        except Exception as error:  # noqa: BLE001  (/health reports it)
            self.error = error

    def _run(self, key, texts):
        return self.engine.answer(texts, {name: value for name, value in key
                                          if name != "request"})

    def options(self, body):
        """A request's decoding options, as a hashable key for the batcher."""
        options = {}
        if body.temperature or body.method == "sample":
            options.update(method="sample", temperature=body.temperature or 1.0)
            if getattr(body, "top_p", None) is not None:
                options["top_p"] = body.top_p
            if body.seed is not None:
                # A seeded draw depends on the batch it is drawn in: decoded alone.
                options.update(seed=body.seed, request=uuid.uuid4().hex)
        elif body.method:
            options["method"] = body.method
        # Decoded to the model's full length (compiled once) and cut after.
        limit = getattr(body, "max_completion_tokens", None) or getattr(body, "max_tokens", None)
        if limit:
            options["max_tokens"] = limit
        options["n"] = getattr(body, "n", 1)
        return tuple(sorted(options.items()))

    async def answer(self, texts, key):
        """The engine's results for `texts`, through the batcher."""
        for text in texts:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise InputError("Received an invalid text: it is not valid Unicode (a lone "
                                 "surrogate such as \\ud800).") from None
        options = {name: value for name, value in key if name != "request"}
        if len(texts) * options["n"] > self.batcher.max_queue:
            raise InputError(f"Received too many answers to give at once: {len(texts)} texts "
                             f"x n={options['n']} is over the server's --max-queue "
                             f"({self.batcher.max_queue}).")
        self.engine.options(options)  # a bad option fails before the queue
        return await asyncio.wait_for(self.batcher.submit(key, texts), self.timeout)


class Guard:
    """ASGI middleware: 411 for a body without a Content-Length, 413 for one
    over `MAX_BODY_BYTES`, 503 for a request to the API before the model is ready.
    (Plain ASGI: Starlette's `BaseHTTPMiddleware` cost a third of the
    server's throughput under load.)"""

    def __init__(self, app, server):
        self.app = app
        self.server = server

    async def __call__(self, scope, receive, send):
        refusal = self.refusal(scope) if scope["type"] == "http" else None
        if refusal is None:
            await self.app(scope, receive, send)
        else:
            await refusal(scope, receive, send)

    def refusal(self, scope):
        length = dict(scope["headers"]).get(b"content-length", b"")
        if scope["method"] == "POST" and not length.isdigit():
            return error_response(411, "a request body needs a Content-Length header")
        if length.isdigit() and int(length) > MAX_BODY_BYTES:
            return error_response(413, f"the body is over {MAX_BODY_BYTES} bytes")
        if scope["path"].startswith("/v1/") and scope["method"] == "POST":
            if self.server.error is not None:
                return error_response(503, f"the model failed to load: {self.server.error}",
                                      kind="server_error")
            if self.server.engine is None:
                return error_response(503, "the model is loading", kind="server_error",
                                      headers={"Retry-After": "1"})
        return None


def create_app(server):
    """The FastAPI application serving `server`."""
    @contextlib.asynccontextmanager
    async def lifespan(app):
        server.loading.start()
        yield

    app = FastAPI(title="keras_transformer", docs_url=None, redoc_url=None, lifespan=lifespan)

    app.add_middleware(Guard, server=server)

    @app.exception_handler(InputError)
    async def bad_option(request, error):
        return error_response(400, str(error))

    @app.exception_handler(QueueFull)
    async def busy(request, error):
        return error_response(503, f"the server is busy: {error}", kind="server_error",
                              headers={"Retry-After": "1"})

    @app.exception_handler(asyncio.TimeoutError)  # the built-in TimeoutError from 3.11
    async def too_slow(request, error):
        return error_response(504, f"no answer within {server.timeout} s", kind="server_error")

    @app.exception_handler(Exception)
    async def bug(request, error):
        logging.getLogger("keras_transformer.serving").error(
            "error answering %s", request.url.path, exc_info=error)
        return error_response(500, f"the server failed: {type(error).__name__}: {error}",
                              kind="server_error")

    @app.exception_handler(RequestValidationError)
    async def invalid(request, error):
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ())[1:]) or None
        message = first.get("msg", "invalid request")
        if first.get("type") == "json_invalid":
            message = "the body is not valid JSON"
        elif first.get("type") == "extra_forbidden":
            message = f"unknown field `{where}`"
        return error_response(400, f"{message} (at {where})" if where else message, where)

    @app.exception_handler(HTTPException)
    async def http_error(request, error):
        return error_response(error.status_code, str(error.detail))

    @app.get("/health")
    def health():
        if server.error is not None:
            return error_response(503, f"the model failed to load: {server.error}",
                                  kind="server_error")
        if server.engine is None:
            return error_response(503, "the model is loading", kind="server_error")
        return {"status": "ok", "model": server.engine.name}

    @app.get("/v1/models")
    def models():
        name = server.engine.name if server.engine else None
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "keras_transformer"}]
        return {"object": "list", "data": data if name else []}

    @app.post("/v1/chat/completions")
    async def chat(body: ChatRequest):
        users = [m for m in body.messages if m.role == "user"]
        question = message_text(users[-1]) if users else ""
        if not question.strip():
            raise InputError("Received an invalid value for argument `messages`: the last "
                             "user message is empty (or there is none).")
        return await respond(body, [question], "chat.completion")

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest):
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        if not prompts or len(prompts) > MAX_TEXTS or not all(p.strip() for p in prompts):
            raise InputError("Received an invalid value for argument `prompt`: expected 1 to "
                             f"{MAX_TEXTS} non-empty strings.")
        return await respond(body, prompts, "text_completion")

    @app.post("/v1/translate")
    async def translate(body: TranslateRequest):
        results = await server.answer(body.texts, server.options(body))
        return {"translations": [result.answers[0].text for result in results]}

    async def respond(body, texts, kind):
        results = await server.answer(texts, server.options(body))
        ident = ("chatcmpl-" if kind == "chat.completion" else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        choices = []
        for result in results:
            for answer in result.answers:
                choice = {"index": len(choices), "finish_reason": answer.finish_reason,
                          "logprobs": None}
                if kind == "chat.completion":
                    choice["message"] = {"role": "assistant", "content": answer.text}
                else:
                    choice["text"] = answer.text
                choices.append(choice)
        completion = sum(a.tokens for r in results for a in r.answers)
        prompt = sum(r.prompt_tokens for r in results)
        response = {"id": ident, "object": kind, "created": created, "model": server.engine.name,
                    "choices": choices,
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion}}
        cut = [r.cut_tokens for r in results]
        if any(cut):
            response["warnings"] = [
                f"text {i} was cut to the model's first {r.prompt_tokens} tokens "
                f"({r.cut_tokens} dropped)" for i, r in enumerate(results) if r.cut_tokens]
        if not body.stream:
            return response
        return StreamingResponse(events(response, kind), media_type="text/event-stream")

    def events(response, kind):
        """Server-sent events: per answer, its text in one chunk, then its finish."""
        chunk_kind = "chat.completion.chunk" if kind == "chat.completion" else kind
        head = {key: response[key] for key in ("id", "created", "model")}
        for choice in response["choices"]:
            index = choice["index"]
            if kind == "chat.completion":
                parts = [{"index": index, "delta": {"role": "assistant",
                                                    "content": choice["message"]["content"]},
                          "finish_reason": None, "logprobs": None},
                         {"index": index, "delta": {}, "finish_reason": choice["finish_reason"],
                          "logprobs": None}]
            else:
                parts = [{"index": index, "text": choice["text"],
                          "finish_reason": choice["finish_reason"], "logprobs": None}]
            for part in parts:
                yield f"data: {json.dumps({**head, 'object': chunk_kind, 'choices': [part]})}\n\n"
        yield "data: [DONE]\n\n"

    @app.get("/")
    def page():
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
