"""`planner serve`: the REST service under uvicorn. Flags override the PLANNER_* settings
(docs/service.md)."""

from __future__ import annotations

import argparse
import os


def register(sub) -> None:
    p = sub.add_parser("serve", help="start the REST service (uvicorn)")
    p.add_argument("--host", help="bind address (PLANNER_HOST, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (PLANNER_PORT, default 8000)")
    p.add_argument("--workers", type=int, metavar="N", help="solver threads per process (PLANNER_WORKERS, default 2)")
    p.add_argument("--processes", type=int, default=1, metavar="N",
                   help="uvicorn worker processes; they share the database (default 1)")
    p.add_argument("--database-url", help="SQLAlchemy URL (PLANNER_DATABASE_URL); default SQLite under PLANNER_DATA_DIR")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from api.settings import Settings

    # settings travel through the environment so every uvicorn process reads the same ones
    if args.workers is not None:
        os.environ["PLANNER_WORKERS"] = str(args.workers)
    if args.database_url:
        os.environ["PLANNER_DATABASE_URL"] = args.database_url
    settings = Settings()
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
