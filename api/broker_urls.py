"""The scale-out URLs (PLANNER_BROKER_URL, PLANNER_RESULTS_URL) checked before anything
connects: which broker a URL names, and where the answers are kept. No Dramatiq here, so
that `planner worker` refuses a bad URL by name before it starts Dramatiq's worker."""

from __future__ import annotations

REDIS_SCHEMES = ("redis", "rediss")
AMQP_SCHEMES = ("amqp", "amqps")


def scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def results_url_for(broker_url: str, results_url: str | None) -> str:
    """The Redis URL the answers are kept at: `results_url`, or the broker's own Redis.
    ValueError naming the setting at fault: a broker that is neither Redis nor RabbitMQ,
    RabbitMQ without a results URL (Dramatiq has no RabbitMQ result backend), a results URL
    that is not Redis."""
    kind = scheme(broker_url)
    if kind not in REDIS_SCHEMES + AMQP_SCHEMES:
        raise ValueError(f"PLANNER_BROKER_URL must be a redis:// or amqp:// URL, got {kind or broker_url!r}")
    if not results_url:
        if kind in AMQP_SCHEMES:
            raise ValueError("PLANNER_RESULTS_URL (redis://host:port/db) is required with an amqp:// "
                             "PLANNER_BROKER_URL: the solves' answers are kept in Redis")
        results_url = broker_url
    if scheme(results_url) not in REDIS_SCHEMES:
        raise ValueError(f"PLANNER_RESULTS_URL must be a redis:// URL, got {scheme(results_url) or results_url!r}")
    return results_url
