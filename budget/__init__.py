"""Team budgets, rate limits and spend accounting, shared by every replica.

    handle = await open_redis(config.redis_url, data_dir)
    store = BudgetStore(handle.client, config.budget, replica_id=rid, data_dir=data_dir)
    res = await store.reserve(...)      # before the upstream call
    await store.settle(res, ...)        # after it, with the real usage

Modules: ``config`` (Limits, BudgetSettings), ``pricing`` (nano-USD money),
``keys`` (Redis layout, calendar windows), ``scripts`` + ``*.lua`` (the atomic
reserve/settle), ``store`` (BudgetStore), ``failopen`` + ``journal`` (Redis
down), ``overrides`` and ``usage`` (/admin and /usage), ``redis_client`` +
``embedded`` (connecting, or running a local Redis).
"""

from budget.nanousd import cost_nanousd, usd, usd_to_nano
from budget.redis_client import RedisHandle, open_redis
from budget.reservation import Reservation
from budget.store import BudgetStore
from core.budget_config import BudgetSettings, Limits

__all__ = [
    "BudgetSettings",
    "BudgetStore",
    "Limits",
    "RedisHandle",
    "Reservation",
    "cost_nanousd",
    "open_redis",
    "usd",
    "usd_to_nano",
]
