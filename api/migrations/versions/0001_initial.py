"""plans and profiles

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "plans",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("created_us", sa.BigInteger, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_index("ix_plans_request_hash", "plans", ["request_hash"])
    op.create_index("ix_plans_created", "plans", ["created_us", "id"])
    op.create_table(
        "profiles",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("created_us", sa.BigInteger, nullable=False),
        sa.Column("device", sa.String(200), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("profiles")
    op.drop_index("ix_plans_created", "plans")
    op.drop_index("ix_plans_request_hash", "plans")
    op.drop_table("plans")
