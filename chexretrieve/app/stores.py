"""Which store a read-only command (search, serve) opens when none is named; none is created."""

from __future__ import annotations

import os
from pathlib import Path

from chexretrieve.store import DEFAULT_DB_URL, sqlite_file

#: the store `make demo` builds (chexretrieve.demo.config.DemoConfig's default data folder)
DEMO_DB_FILE = Path("data/demo/chexretrieve.sqlite")


def resolve_read_store(db_url: str | None) -> str:
    """The store URL a read-only command uses.

    ``db_url`` when given, else ``$CHEXRETRIEVE_DB``, else ``./chexretrieve.sqlite`` (what
    ``ingest`` writes without ``--db``) when that file exists, else the demo store when
    ``make demo`` built it. Nothing is created: with none of them, ValueError says how to name
    or build a store.
    """
    if db_url:
        return db_url
    named = os.environ.get("CHEXRETRIEVE_DB", "").strip()
    if named:
        return named
    default_file = sqlite_file(DEFAULT_DB_URL)
    if default_file is not None and default_file.is_file():
        return DEFAULT_DB_URL
    if DEMO_DB_FILE.is_file():
        return f"sqlite:///{DEMO_DB_FILE.resolve()}"
    raise ValueError(
        f"no store to search: none given with --db, $CHEXRETRIEVE_DB is not set, and neither "
        f"./{default_file.name if default_file else 'chexretrieve.sqlite'} nor the demo store "
        f"{DEMO_DB_FILE} exists here; pass --db sqlite:///PATH/TO/store.sqlite, or run `make demo` "
        f"(builds {DEMO_DB_FILE}) in this folder first"
    )
