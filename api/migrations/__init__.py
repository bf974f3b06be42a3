"""Alembic migrations of the service database; `api.store.migrate` runs them at startup."""
