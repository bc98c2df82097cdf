"""``POST /v1/messages/count_tokens``: Anthropic's token count, answered by the gateway itself.

    ROUTES["/v1/messages/count_tokens"](http)   # -> {"input_tokens": 42}

    curl -s localhost:8080/v1/messages/count_tokens -H "x-api-key: sk-routegate-demo" \\
      -d '{"model": "small", "messages": [{"role": "user", "content": "Hello"}]}'

Claude Code calls it to size its context. Served in plain ASGI beside the
doors (``gateway.asgi``), not through FastAPI, so that every refusal (a
missing key, a body over ``max_body_bytes``, malformed JSON) is in
Anthropic's error shape like the rest of ``/v1/messages``; the key is
checked before a byte of the body is read, and the call counts against the
team's rpm like a request. The body is capped like the doors' (bytes, JSON
objects). Nothing goes upstream, and nothing is billed
(``gateway/protocols/anthropic_messages/count.py``).
"""

from __future__ import annotations

import asyncio
import logging

import orjson

from budget.journal import RELEASE_ONLY
from core.config import GatewayConfig, ModelConfig
from core.errors import GatewayError
from gateway.auth import Caller
from gateway.exchange import Handler, HTTPExchange
from gateway.ids import new_request_id, response_request_id
from gateway.pipeline.features import LONG_PROMPT_BYTES
from gateway.pipeline.request import check_shape, load_object
from gateway.pipeline.serve import INTERNAL, ClientGone
from gateway.protocols.anthropic_messages.count import count_input_tokens
from gateway.protocols.anthropic_messages.errors import render_error
from gateway.state import AppState

logger = logging.getLogger("routegate.anthropic")
COUNT_PATH = "/v1/messages/count_tokens"
DEFAULT_ENCODING = ModelConfig.model_fields["tokenizer"].default


def encoding_of(config: GatewayConfig, model: object) -> str:
    """The named model's tokenizer; any other name (``auto``, an alias) counts as the default."""
    return next((m.tokenizer for m in config.models if m.name == model), DEFAULT_ENCODING)


async def count_one_request(gw: AppState, caller: Caller) -> None:
    """A count is a request like any other to the team's rpm (a hold of nothing,
    released at once): counting is work, and it is not free of limits."""
    if not gw.config.budget.enabled:
        return
    held = await gw.budget.reserve(
        request_id=new_request_id(), team=caller.team.name, team_limits=caller.team.budget,
        key_id=caller.key_id, key_limits=caller.key.budget, model=RELEASE_ONLY,
        max_cost_nanousd=0, max_tokens=0)
    gw.budget.settle(held, input_tokens=0, output_tokens=0, cost_nanousd=0, model=RELEASE_ONLY)


async def _refuse(http: HTTPExchange, exc: GatewayError, headers: dict[str, str]) -> None:
    status, error = render_error(exc)
    await http.send_json(status, error, {**exc.headers, **headers})


async def count_tokens(http: HTTPExchange) -> None:
    gw: AppState = http.app.state.gw
    headers = {"x-request-id": response_request_id(http.headers.get("x-request-id"))}
    try:
        caller = gw.keyring.authenticate(http.headers)
        await count_one_request(gw, caller)        # the team's rpm counts it; nothing is held
        raw = await http.read_body(gw.config.max_body_bytes)
        check_shape(raw, gw.config.max_body_objects)
        body = load_object(raw)
        encoding = encoding_of(gw.config, body.get("model"))
        if len(raw) > LONG_PROMPT_BYTES:     # tiktoken releases the GIL: off the event loop
            n = await asyncio.to_thread(count_input_tokens, body, encoding)
        else:
            n = count_input_tokens(body, encoding)
        await http.send_json(200, orjson.dumps({"input_tokens": n}), headers)
    except ClientGone:
        pass
    except GatewayError as exc:
        await _refuse(http, exc, headers)
    except Exception:      # a bug (or a body nested past any sane depth): still an answer
        logger.exception("count_tokens failed inside the gateway")
        await _refuse(http, INTERNAL, headers)
    finally:
        http.close()


ROUTES: dict[str, Handler] = {COUNT_PATH: count_tokens}
