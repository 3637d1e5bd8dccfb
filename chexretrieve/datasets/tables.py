"""CSV files as the data sets ship them: plain or gzip-compressed (``.csv.gz``), UTF-8, a header."""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterator
from pathlib import Path

_GZIP_MAGIC = b"\x1f\x8b"


def open_text(path: str | Path) -> io.TextIOBase:
    """The file as text, decompressed when it is gzip (by its first bytes, whatever its name).

    ValueError names the file when it cannot be opened.
    """
    source = Path(path)
    try:
        with source.open("rb") as probe:
            magic = probe.read(2)
        if magic == _GZIP_MAGIC:
            return io.TextIOWrapper(gzip.open(source, "rb"), encoding="utf-8-sig", newline="")
        return source.open(encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise ValueError(f"cannot read {source}: {exc.strerror or exc}") from None


def read_header(path: str | Path) -> list[str]:
    """The header row (stripped names); ValueError when the file is empty or not a CSV."""
    with open_text(path) as handle:
        try:
            return [name.strip() for name in next(csv.reader(handle))]
        except StopIteration:
            raise ValueError(f"{path} is empty; expected a CSV header line") from None
        except (csv.Error, UnicodeDecodeError, OSError, EOFError) as exc:
            raise ValueError(f"{path} is not a readable CSV: {exc}") from None


def iter_records(path: str | Path) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, {column: stripped cell}) for every non-empty row; ValueError names the line."""
    source = Path(path)
    with open_text(source) as handle:
        reader = csv.reader(handle)
        try:
            header = [name.strip() for name in next(reader)]
        except StopIteration:
            raise ValueError(f"{source} is empty; expected a CSV header line") from None
        except (csv.Error, UnicodeDecodeError, OSError, EOFError) as exc:
            raise ValueError(f"{source} is not a readable CSV: {exc}") from None
        try:
            for record in reader:
                if not any(cell.strip() for cell in record):
                    continue
                if len(record) != len(header):
                    raise ValueError(
                        f"{source}:{reader.line_num}: {len(record)} fields, but the header has "
                        f"{len(header)}; check for unquoted commas"
                    )
                yield reader.line_num, {h: c.strip() for h, c in zip(header, record, strict=True)}
        except (csv.Error, UnicodeDecodeError, OSError, EOFError) as exc:
            raise ValueError(f"{source}:{reader.line_num}: unreadable CSV line: {exc}") from None


def require_columns(
    path: str | Path, header: list[str], wanted: tuple[str, ...], what: str
) -> None:
    missing = [name for name in wanted if name not in header]
    if missing:
        raise ValueError(
            f"{path} lacks the column(s) {missing} of {what} (it has: {header}); is it the file "
            "as shipped?"
        )


def find_file(folder: Path, name: str) -> Path | None:
    """``folder/name`` or ``folder/name.gz``, whichever exists (the plain file first)."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None
