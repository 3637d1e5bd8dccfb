"""`chexretrieve serve`: the case-lookup UI over one archive (Gradio is imported on use)."""

from __future__ import annotations

from pathlib import Path

import typer

#: what `serve --login` (the shared password of earlier versions) now says
LOGIN_MOVED = (
    "--login (one shared password) was replaced by per-user accounts: add each person with "
    "`chexretrieve users add NAME --role radiologist|curator|admin`, then run "
    "`chexretrieve serve --accounts` (containers: `users add NAME --role admin --password-env "
    "CHEXRETRIEVE_UI_PASSWORD --exists-ok` first; see docs/accounts-and-access.md)"
)


def serve_command(
    db: str | None = typer.Option(
        None,
        "--db",
        help="Store URL (default: $CHEXRETRIEVE_DB, else ./chexretrieve.sqlite if it exists, "
        "else the demo store data/demo/chexretrieve.sqlite; none is ever created).",
    ),
    encoder: str = typer.Option("phantom", "--encoder", help="Encoder spec of the archive."),
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        help="Address to bind; anything but loopback needs --accounts or --trusted-header.",
    ),
    port: int = typer.Option(7860, "--port", help="Port to listen on (the first worker's)."),
    workers: int = typer.Option(
        1,
        "--workers",
        help="Serving processes forked after the imports (sharing their memory), worker i on "
        "port + i; put a reverse proxy with sticky sessions in front (docs/archive-index.md).",
    ),
    accounts: bool = typer.Option(
        False, "--accounts", help="Sign in with the store's accounts (`chexretrieve users add`)."
    ),
    trusted_header: str | None = typer.Option(
        None,
        "--trusted-header",
        help="SSO reverse-proxy mode: the header naming the signed-in user (e.g. X-Remote-User).",
    ),
    trusted_proxy: list[str] = typer.Option(
        [],
        "--trusted-proxy",
        help="Address or CIDR of a reverse proxy (repeatable): its --trusted-header is believed, "
        "and with --accounts its X-Forwarded-For names the client.",
    ),
    lockout_s: float = typer.Option(
        2.0,
        "--lockout-s",
        help="Seconds a user name or address waits after its free failed sign-ins (5 per name, "
        "20 per address); each further failure doubles it, up to 15 min or this.",
    ),
    ssl_certfile: Path | None = typer.Option(
        None, "--ssl-certfile", help="TLS certificate (PEM): serve HTTPS."
    ),
    ssl_keyfile: Path | None = typer.Option(
        None, "--ssl-keyfile", help="TLS private key (PEM) of --ssl-certfile."
    ),
    login: str | None = typer.Option(
        None, "--login", hidden=True, help="Replaced by --accounts (per-user accounts)."
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
    prior: list[str] = typer.Option(
        [],
        "--prior",
        help="Private broad set (id@version or id) joining the posterior prior "
        "besides this store's own imported reports (repeatable).",
    ),  # fmt: skip
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
    search_backend: str = typer.Option(
        "local", "--search-backend", help="Where to rank: local, or ray (shards of the index)."
    ),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Ray head HOST:PORT for --search-backend ray ($RAY_ADDRESS)."
    ),
    shards: int = typer.Option(4, "--shards", help="Index shards (Ray actors) to rank in."),
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

    from chexretrieve.accounts.config import AccessConfig
    from chexretrieve.search.config import ShardedSearchConfig
    from chexretrieve.ui.config import UIConfig

    console = Console(stderr=True)
    try:
        if login is not None:
            raise ValueError(LOGIN_MOVED)
        if accounts and trusted_header:
            raise ValueError("choose one sign-in: --accounts or --trusted-header, not both")
        if not lockout_s > 0:
            raise ValueError(f"--lockout-s must be a positive number of seconds, not {lockout_s}")
        longest = max(AccessConfig.max_delay_s, lockout_s)
        access = AccessConfig(
            trusted_header=trusted_header,
            trusted_proxies=tuple(trusted_proxy),
            first_delay_s=lockout_s,
            max_delay_s=longest,
            failure_memory_s=max(AccessConfig.failure_memory_s, longest),
        )
        config = UIConfig(
            db_url=db,
            encoder=encoder,
            host=host,
            port=port,
            workers=workers,
            sign_in="header" if trusted_header else "accounts" if accounts else "none",
            access=access,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            max_upload_mb=max_upload_mb,
            feature_cache_dir=features,
            reports_dir=reports,
            anchors_dir=anchors,
            prior=tuple(prior),
            reports_csv=tuple(reports_csv),
            index_kind=index,
            sharding=ShardedSearchConfig(search_backend, ray_address, shards),
            dicomweb_url=dicomweb,
            ohif_dir=ohif_dir,
        )
        from chexretrieve.app import ensure_port_free
        from chexretrieve.ui import serve_app
        from chexretrieve.ui.app import check_sign_in
        from chexretrieve.ui.serve_process import limit_malloc_arenas, serve_workers, worker_ports

        limit_malloc_arenas()  # before any thread: fewer arenas keeping freed memory
        if config.plain_http_warning:
            console.print(f"[yellow]warning:[/yellow] {escape(config.plain_http_warning)}")
        ports = worker_ports(port, workers)
        for each in ports:
            ensure_port_free(host, each)  # before the archive and the model are loaded
        check_sign_in(config)
        scheme = "https" if ssl_certfile else "http"
        if workers == 1:
            console.print(f"case lookup on {scheme}://{host}:{port} (Ctrl+C stops it)")
            serve_app(config)
            return
        shown = ", ".join(f"{scheme}://{host}:{each}" for each in ports)
        console.print(f"case lookup in {workers} workers on {shown} (Ctrl+C stops them)")
        stopped = serve_workers(config, serve_app)
    except (ValueError, OSError) as exc:  # busy port, missing store: one line, no traceback
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if stopped is not None:
        console.print(f"[red]error:[/red] {escape(stopped)}")
        raise typer.Exit(1)
