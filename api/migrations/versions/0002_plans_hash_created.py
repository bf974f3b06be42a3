"""plans: index (request_hash, created_us, id) for the cached lookup and retention

The cached lookup takes the newest plan of a request hash; with an index on the hash alone
it read every row of the hash (bodies included) to sort them. This index serves the choice
and the per-hash pruning from the index; it supersedes ix_plans_request_hash.

Revision ID: 0002
Revises: 0001
Create Date: 2025-02-01
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_plans_hash_created", "plans", ["request_hash", "created_us", "id"])
    op.drop_index("ix_plans_request_hash", "plans")


def downgrade() -> None:
    op.create_index("ix_plans_request_hash", "plans", ["request_hash"])
    op.drop_index("ix_plans_hash_created", "plans")
