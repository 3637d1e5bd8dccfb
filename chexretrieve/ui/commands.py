"""`chexretrieve serve`: the case-lookup UI over one archive (Gradio is imported on use)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from chexretrieve.ui.config import PASSWORD_ENV


def serve_command(
    db: str | None = typer.Option(
        None,
        "--db",
        help="Store URL (default: $CHEXRETRIEVE_DB, else ./chexretrieve.sqlite if it exists, "
        "else the demo store data/demo/chexretrieve.sqlite; none is ever created).",
    ),
    encoder: str = typer.Option("phantom", "--encoder", help="Encoder spec of the archive."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind; anything but loopback needs --login."
    ),
    port: int = typer.Option(7860, "--port", help="Port to listen on."),
    login: str | None = typer.Option(
        None, "--login", help=f"Require this user name; the password is read from ${PASSWORD_ENV}."
    ),
    max_upload_mb: int = typer.Option(50, "--max-upload-mb", help="Largest upload in MiB."),
    features: Path | None = typer.Option(
        None, "--feature-cache", help="Folder for persisted gallery features."
    ),
    reports: Path = typer.Option(
        Path("eval/reports"), "--reports", help="Folder of evaluation reports (newest shown)."
    ),
    anchors: Path | None = typer.Option(
        None, "--anchors", help="Anchor-set folder (default: $CHEXRETRIEVE_ANCHORS or anchors/)."
    ),
    reports_csv: list[Path] = typer.Option(
        [],
        "--reports-csv",
        help="CSV with Path and Report columns: report text of archived images (repeatable; "
        "default: a reports.csv above the archived files, as phantom archives have).",
    ),
    index: str = typer.Option(
        "none",
        "--index",
        help="Ranking index for galleries of 500,000+ images: none, exact, hnsw, ivf.",
    ),
    dicomweb: str | None = typer.Option(
        None,
        "--dicomweb",
        help="DICOMweb URL of the PACS the archive came from, for the OHIF viewer (default: the "
        "app's own read-only /dicomweb over the archived files).",
    ),
    ohif_dir: Path | None = typer.Option(
        None,
        "--ohif-dir",
        help="Installed OHIF dist/ folder (default: the one make setup installs).",
    ),
) -> None:
    """Serve the case-lookup UI: search by case or upload, explanations, curation, evaluation."""
    from rich.console import Console
    from rich.markup import escape

    from chexretrieve.ui.config import UIConfig

    console = Console(stderr=True)
    try:
        auth = None
        if login is not None:
            password = os.environ.get(PASSWORD_ENV, "")
            if not password:
                raise ValueError(f"--login {login} needs the password in ${PASSWORD_ENV}")
            auth = (login, password)
        config = UIConfig(
            db_url=db,
            encoder=encoder,
            host=host,
            port=port,
            auth=auth,
            max_upload_mb=max_upload_mb,
            feature_cache_dir=features,
            reports_dir=reports,
            anchors_dir=anchors,
            reports_csv=tuple(reports_csv),
            index_kind=index,
            dicomweb_url=dicomweb,
            ohif_dir=ohif_dir,
        )
        from chexretrieve.app import ensure_port_free
        from chexretrieve.ui import serve_app

        ensure_port_free(host, port)  # before the archive and the model are loaded
        console.print(f"case lookup on http://{host}:{port} (Ctrl+C stops it)")
        serve_app(config)
    except (ValueError, OSError) as exc:  # busy port, missing store: one line, no traceback
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
