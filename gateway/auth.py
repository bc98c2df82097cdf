"""API keys: stored only as ``sha256:<hex>``, looked up in one dict.

    ring = KeyRing.from_config(config)
    caller = ring.authenticate({"authorization": "Bearer sk-routegate-demo"})  # or AuthenticationFailed
    caller = ring.authenticate({"x-api-key": "sk-routegate-demo"})             # Anthropic's header
    caller = ring.authenticate({"api-key": "sk-routegate-demo"})               # Azure OpenAI's header

A team key may arrive in any of the three headers, so the Anthropic and
Azure SDKs work unchanged. The admin key is accepted only as a bearer token
(``admin_key_matches``): no SDK sends it, and one spelling is one thing to audit.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from core.budget_config import Limits
from core.cache_config import ResponseCacheConfig
from core.config import GatewayConfig, KeyConfig, PoolName, TeamConfig
from core.errors import AuthenticationFailed
from core.learning_config import ShadowConfig

log = logging.getLogger("routegate.auth")
# Below this many characters an admin key is guessable enough to warn about at start-up.
ADMIN_KEY_MIN_CHARS = 16


def hash_key(key: str) -> str:
    """The form keys take in config: ``routegate hash-key KEY`` prints it."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def closing() -> dict[str, str]:
    """Headers for a refusal answered before the body is read: closing the
    connection is what spares the gateway reading (and discarding) that body."""
    return {"connection": "close"}


@dataclass(frozen=True, slots=True)
class Caller:
    team: TeamConfig
    key: KeyConfig
    # Read on every request, so worked out once when the key ring is built (a config
    # model's attribute costs several times a plain one's, core.model_config.ModelFacts):
    # a short, non-secret name for the key (for logs and per-key limits), the team's name,
    # both budgets, and the team's settings the request path reads.
    key_id: str = field(init=False)
    team_name: str = field(init=False)
    team_limits: Limits | None = field(init=False)
    key_limits: Limits | None = field(init=False)
    quality: float = field(init=False)
    allowed_models: list[str] | None = field(init=False)
    allowed_pools: list[PoolName] | None = field(init=False)
    default_pool: PoolName | None = field(init=False)      # the key's, else the team's
    classifier: str | None = field(init=False)
    feedback: bool = field(init=False)
    shadow: ShadowConfig | None = field(init=False)
    response_cache: ResponseCacheConfig | None = field(init=False)

    def __post_init__(self) -> None:
        team = self.team
        for name, value in (("key_id", self.key.name or self.key.hash[7:19]),
                            ("team_name", team.name), ("team_limits", team.budget),
                            ("key_limits", self.key.budget), ("quality", team.quality),
                            ("allowed_models", team.allowed_models),
                            ("allowed_pools", team.allowed_pools),
                            ("default_pool", self.key.default_pool or team.default_pool),
                            ("classifier", team.classifier), ("feedback", team.feedback),
                            ("shadow", team.shadow), ("response_cache", team.response_cache)):
            object.__setattr__(self, name, value)


def bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The team key from ``Authorization: Bearer``, ``x-api-key`` or ``api-key``, in that order."""
    token = bearer_token(headers.get("authorization"))
    if token is None:
        token = (headers.get("x-api-key") or headers.get("api-key") or "").strip() or None
    return token


class KeyRing:
    def __init__(self, callers: dict[str, Caller]) -> None:
        self._callers = callers

    @classmethod
    def from_config(cls, config: GatewayConfig) -> KeyRing:
        return cls({k.hash: Caller(team, k) for team in config.teams for k in team.key_configs()})

    def team(self, name: str) -> Caller | None:
        """Any caller of the team ``name`` (for admin look-ups)."""
        return next((c for c in self._callers.values() if c.team.name == name), None)

    def lookup(self, team: str, key_hash: str) -> Caller | None:
        """The caller whose key hashes to ``key_hash``, if it still belongs to ``team``
        (batch workers run each line as the key that created the batch)."""
        caller = self._callers.get(key_hash)
        return caller if caller is not None and caller.team.name == team else None

    def authenticate(self, headers: Mapping[str, str] | str | None) -> Caller:
        """The caller a request's headers name. A bare string (or None) is taken
        as the ``Authorization`` header's value, as callers passed it before."""
        if headers is None or isinstance(headers, str):
            headers = {"authorization": headers or ""}
        token = presented_key(headers)
        if token is None:
            raise AuthenticationFailed(
                "Missing API key. Send it as 'Authorization: Bearer <key>' "
                "(or in an 'x-api-key' or 'api-key' header).", code="missing_api_key",
                headers=closing())
        caller = self._callers.get(hash_key(token))
        if caller is None:
            raise AuthenticationFailed("Incorrect API key provided.", headers=closing())
        return caller


def admin_key(config: GatewayConfig) -> str | None:
    """The configured admin key, or None when its variable is unset or empty."""
    return os.environ.get(config.admin_key_env) or None


def key_equals(presented: str, expected: str) -> bool:
    return hmac.compare_digest(presented.encode(), expected.encode())


def admin_key_matches(config: GatewayConfig, authorization: str | None) -> bool:
    expected = admin_key(config)
    token = bearer_token(authorization)
    if not expected or token is None:
        return False
    return key_equals(token, expected)
