"""`planner serve`: the REST service under uvicorn. Flags override the PLANNER_* settings
(docs/service.md)."""

from __future__ import annotations

import argparse
import os

from pydantic import ValidationError

from cost_model.specs.errors import SpecError

from .flags import add_flags


def register(sub) -> None:
    p = sub.add_parser("serve", help="start the REST service (uvicorn)")
    add_flags(p, "serve")
    p.set_defaults(func=run)


def load_settings(settings_type: type):
    """The PLANNER_* settings, or a SpecError (exit 2) naming the bad one, before any process starts."""
    try:
        return settings_type()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "PLANNER_" + "_".join(str(p) for p in first["loc"]).upper()
        raise SpecError(name, first["msg"].removeprefix("Value error, ")) from None


def run(args: argparse.Namespace) -> int:
    import uvicorn  # noqa: PLC0415 (startup: only `planner serve` loads the web stack)

    from api.settings import Settings  # noqa: PLC0415 (startup: only `planner serve` loads the web stack)

    # settings travel through the environment so every uvicorn process reads the same ones
    if args.workers is not None:
        os.environ["PLANNER_WORKERS"] = str(args.workers)
    if args.database_url:
        os.environ["PLANNER_DATABASE_URL"] = args.database_url
    settings = load_settings(Settings)
    uvicorn.run(
        "api.app:create_app",
        factory=True,
        host=args.host or settings.host,
        port=args.port or settings.port,
        workers=args.processes,
        log_level=args.log_level,
        proxy_headers=True,
    )
    return 0
