"""`chexretrieve search`: one search from the command line (table or JSON), through the
composition root, so it opens the same store and encoder as the UI and is written to the audit
trail."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer

from chexretrieve import strict_json
from chexretrieve.geometry import GEOMETRY_CHOICES


def _date(value: str | None, option: str) -> dt.date | None:
    if not value:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{option} must be a date like 2024-03-31, not {value!r}"
        ) from None


def search_command(
    finding: str = typer.Option(..., "--finding", "-f", help="Finding that defines similarity."),
    case: int | None = typer.Option(None, "--case", help="Archived image id to query by."),
    image: Path | None = typer.Option(
        None, "--image", exists=True, dir_okay=False, help="DICOM / PNG / JPEG to query by."
    ),
    db: str | None = typer.Option(
        None,
        "--db",
        help="Store URL (default: $CHEXRETRIEVE_DB, else ./chexretrieve.sqlite if it exists, "
        "else the demo store data/demo/chexretrieve.sqlite; none is ever created).",
    ),
    encoder: str = typer.Option("phantom", "--encoder", help="Encoder spec of the archive."),
    geometry: str = typer.Option(
        "softmax", "--geometry", "-g", help=f"One of: {', '.join(GEOMETRY_CHOICES)}."
    ),
    anchor_set: str | None = typer.Option(
        None, "--anchor-set", help="Anchor set id@version (default: the finding's latest)."
    ),
    top_k: int = typer.Option(10, "--top-k", "-k", help="Results to return."),
    text: str | None = typer.Option(None, "--text", help="Free text combined with the image."),
    view: list[str] = typer.Option([], "--view", help="Keep these views (repeatable)."),
    sex: str | None = typer.Option(None, "--sex", help="Keep M, F or O."),
    age_min: float | None = typer.Option(None, "--age-min"),
    age_max: float | None = typer.Option(None, "--age-max"),
    date_from: str | None = typer.Option(None, "--date-from", help="YYYY-MM-DD"),
    date_to: str | None = typer.Option(None, "--date-to", help="YYYY-MM-DD"),
    label_known: bool = typer.Option(False, "--label-known", help="Only labelled results."),
    explain: bool = typer.Option(False, "--explain", help="Show the anchor explanation."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    prior: list[str] = typer.Option(
        [],
        "--prior",
        help="Private broad set (id@version or id) joining the posterior prior "
        "besides this store's own imported reports (repeatable).",
    ),  # fmt: skip
    search_backend: str = typer.Option(
        "local", "--search-backend", help="Where to rank: local, or ray (shards of the index)."
    ),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Ray head HOST:PORT for --search-backend ray ($RAY_ADDRESS)."
    ),
    shards: int = typer.Option(4, "--shards", help="Index shards (Ray actors) to rank in."),
) -> None:
    """Find archived cases similar to a query case or image with respect to one finding."""
    from rich.console import Console
    from rich.markup import escape

    from chexretrieve.app import AppConfig, open_search_app
    from chexretrieve.density.config import FIT_NOW, DensityConfig
    from chexretrieve.index import IndexDamaged
    from chexretrieve.search.config import SearchConfig, ShardedSearchConfig
    from chexretrieve.search.duplicates import content_signature
    from chexretrieve.search.gallery import SearchFilters
    from chexretrieve.search.output import print_result, result_as_dict
    from chexretrieve.search.service import SearchRequest

    console = Console(stderr=True)
    if (case is None) == (image is None):
        raise typer.BadParameter("give exactly one of --case ID or --image FILE")
    try:
        filters = SearchFilters(
            views=tuple(view),
            sex=sex,
            age_min=age_min,
            age_max=age_max,
            date_from=_date(date_from, "--date-from"),
            date_to=_date(date_to, "--date-to"),
            label_known=label_known,
        )
        radiograph = None  # the query image is read first: what is wrong with it comes first
        if image is not None:
            from chexretrieve.dicom import RejectedFile, read_radiograph
            from chexretrieve.dicom.query_messages import upload_message

            try:
                radiograph = read_radiograph(image)
            except RejectedFile as exc:  # said of a query image, not of an archive being ingested
                raise ValueError(
                    upload_message(
                        image.name,
                        exc.reason,
                        exc.message,
                        "The query image",
                        "give --image a DICOM, PNG or JPEG chest radiograph",
                    )  # fmt: skip
                ) from None
        # a one-shot process fits a missing archive density now (a background fit would die
        # with the process); `chexretrieve density fit` or `ingest --fit-density` do it ahead
        density = DensityConfig(background_fit_above=FIT_NOW)
        search = SearchConfig(sharding=ShardedSearchConfig(search_backend, ray_address, shards))
        config = AppConfig(db_url=db, encoder=encoder, density=density, search=search,
                           prior=tuple(prior))  # fmt: skip
        service = open_search_app(config).service
        request = SearchRequest(
            finding=finding,
            geometry=geometry,
            case_id=case,
            image=radiograph.pixels if radiograph is not None else None,
            # the image's own study and pixels, when archived, are not results, nor are
            # archived copies of its content (as PNG, JPEG, another size)
            query_study_uid=radiograph.metadata.study_uid if radiograph else None,
            query_pixel_sha256=radiograph.pixel_sha256 if radiograph else None,
            query_signature=content_signature(radiograph.pixels) if radiograph else None,
            text=text,
            anchor_set=anchor_set,
            top_k=top_k,
            filters=filters,
            explain=explain,
        )
        try:
            result = service.search(request)
        except IndexDamaged:  # an index file failed its seal: rebuilt by now, never served
            result = service.search(request)
    except ValueError as exc:  # StoreError, EncoderError and bad requests: one line, exit 2
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None

    if as_json:
        typer.echo(strict_json.dumps(result_as_dict(result), indent=2))
        return
    print_result(result, explain)
