"""Service settings, read from `PLANNER_*` environment variables (docs/service.md lists them)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .broker_urls import results_url_for


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PLANNER_", extra="ignore")

    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db; "
        "unset = SQLite file planner.db under data_dir",
    )
    data_dir: Path = Field(Path("."), description="directory of the default SQLite file")
    api_token: str | None = Field(
        None, description="when set, every /v1 route needs `Authorization: Bearer <token>`; "
        "set but empty is refused (unset it to run without auth)"
    )
    public_docs: bool = Field(
        False, description="serve /openapi.json, /docs and /redoc without the token (they need it when api_token is set)"
    )
    host: str = Field("127.0.0.1", description="bind address of `planner serve`")
    port: int = Field(8000, description="port of `planner serve`")
    workers: int = Field(2, ge=1, le=256, description="solver worker processes (concurrent solves)")
    broker_url: str | None = Field(
        None, description="redis://host:port/db or amqp://user:pw@host:port/vhost (RabbitMQ): solves go through a "
        "Dramatiq queue to `planner worker` processes (docs/service.md, Scale-out); unset: this process's own worker "
        "processes"
    )
    results_url: str | None = Field(
        None, description="redis://host:port/db: where the workers' answers are kept; default the broker's Redis, "
        "required with an amqp:// broker"
    )
    worker_max_tasks: int = Field(
        1, ge=0, le=1_000_000, description="solves one worker process runs before it is replaced by a fresh one "
        "(0: never); 1: each solve's memory goes back when it ends"
    )
    queue_size: int = Field(
        16, ge=0, le=100_000, description="solves that may wait for a worker; beyond it: 429"
    )
    solve_time_limit_s: float = Field(
        30.0, gt=0, description="upper bound on one solve; a request's search.time_limit_s may lower it"
    )
    max_body_bytes: int = Field(1_048_576, ge=1024, description="larger request bodies get 413")
    retry_after_s: int = Field(2, ge=1, description="Retry-After seconds sent with 429/503")
    # 2: after a refresh the plan it replaced is still readable by the clients that hold its id
    plans_per_request: int = Field(
        2, ge=1, le=1000, description="stored plans kept per request hash; a refresh beyond it deletes the oldest"
    )
    plan_retention_s: float | None = Field(
        None, gt=0, description="when set, plans older than this are deleted as new ones are stored"
    )
    sweep_time_limit_s: float = Field(
        120.0, gt=0, description="deadline of one POST /v1/sweeps; points it leaves no time for are skipped"
    )
    # Test-only hook: every solve sleeps this long before it starts, so tests can fill the
    # queue deterministically. Never set it in production.

    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'planner.db').resolve()}"

    @field_validator("api_token")
    @classmethod
    def _token_not_blank(cls, token: str | None) -> str | None:
        # `PLANNER_API_TOKEN=` (a secret that failed to render) must not silently mean "no auth"
        if token is not None and not token.strip():
            raise ValueError("is set but empty; give a token, or unset PLANNER_API_TOKEN to run "
                             "without authentication")
        return token

    @model_validator(mode="after")
    def _scale_out_urls(self) -> Settings:
        # a broker that is neither Redis nor RabbitMQ, or RabbitMQ without a Redis for the
        # answers, is refused at startup by name, not at the first solve
        if self.broker_url:
            results_url_for(self.broker_url, self.results_url)
        return self
