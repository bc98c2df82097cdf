"""The routes' one JSON response: orjson bytes, ``application/json``.

    return json_response({"object": "list", "data": rows})
    return json_response(body, 404, headers={"x-request-id": rid})
"""

from __future__ import annotations

import orjson
from fastapi.responses import Response


def json_response(data: object, status: int = 200,
                  headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json",
                    headers=headers)
