"""Alembic environment of the chexretrieve store.

The store runs migrations itself when it opens a database (``chexretrieve.store.open_store``)
and hands its own connection over in ``config.attributes["connection"]``, so SQLite pragmas and
the single-writer lock apply to migrations too. Run by hand,
``alembic -c db/alembic.ini upgrade head`` connects to the URL in ``CHEXRETRIEVE_DB`` (or
``sqlalchemy.url`` in alembic.ini).
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine

from chexretrieve.store.schema import metadata

config = context.config


def _configure_and_run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most things in place; batch mode copies the table instead
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    url = os.environ.get("CHEXRETRIEVE_DB") or config.get_main_option("sqlalchemy.url")
    context.configure(url=url, target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure_and_run(connection)
        return
    url = os.environ.get("CHEXRETRIEVE_DB") or config.get_main_option("sqlalchemy.url")
    engine = create_engine(url)
    with engine.connect() as conn:
        _configure_and_run(conn)
        conn.commit()
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
