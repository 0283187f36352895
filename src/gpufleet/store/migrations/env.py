"""Alembic environment: runs on the connection handed in by ``Database.migrate``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from gpufleet.store.tables import Base

config = context.config
connection = config.attributes.get("connection")

if connection is None:  # plain `alembic` CLI use
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "sqlite://")
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
