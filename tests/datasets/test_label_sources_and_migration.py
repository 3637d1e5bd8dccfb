"""Several --labels files in one ingest (.csv.gz too), CheXpert-format CSVs of other archives
not taken for CheXpert, and migration 0004 on a store written before it."""

from __future__ import annotations

import gzip

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from dataset_fakes import CHEXPERT_HEADER, write_jpeg
from typer.testing import CliRunner

from chexretrieve.cli import app
from chexretrieve.store import StoreConfig, open_store
from chexretrieve.store.engine import migrations_folder

runner = CliRunner()


def ingest(*args: str):
    return runner.invoke(
        app, ["ingest", *args, "--encoder", "stand-in", "--no-progress", "--workers", "0"]
    )


def _labels_csv(rows: list[tuple[str, str, str]]) -> str:
    """Path + the CheXpert columns with Edema and Pleural Effusion given (others blank)."""
    header = ",".join(CHEXPERT_HEADER)
    lines = [header]
    for path, edema, effusion in rows:
        cells = {"Path": path, "Sex": "Male", "Age": "50", "Frontal/Lateral": "Frontal",
                 "AP/PA": "PA", "Edema": edema, "Pleural Effusion": effusion}  # fmt: skip
        lines.append(",".join(cells.get(c, "") for c in CHEXPERT_HEADER))
    return "\n".join(lines) + "\n"


def test_two_labels_files_one_gzipped_and_a_split_fixed_by_reingest(tmp_path, test_encoders):
    archive = tmp_path / "archive"
    for seed, name in enumerate(("train/p1/s1/a.jpg", "train/p2/s1/b.jpg", "valid/p3/s1/c.jpg")):
        write_jpeg(archive / name, 40 + seed)
    first = tmp_path / "first.csv"
    first.write_text(_labels_csv([("train/p1/s1/a.jpg", "1.0", ""), ("train/p2/s1/b.jpg", "0.0",
                                                                       "-1.0")]))  # fmt: skip
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    result = ingest(str(archive), "--db", url, "--labels", str(first))
    assert result.exit_code == 0, result.output
    assert "data set:" not in result.output  # not CheXpert's own files: not read as CheXpert
    with open_store(url) as store:
        frame = store.dataset_frame().set_index("dataset_path")
    c = str(archive / "valid/p3/s1/c.jpg")
    assert frame.loc[c, "split"] == "" and str(frame.loc[c, "Edema"]) == "nan"
    second = tmp_path / "second.csv.gz"
    second.write_bytes(gzip.compress(_labels_csv([("valid/p3/s1/c.jpg", "1.0", "0.0")]).encode()))
    again = ingest(str(archive), "--db", url, "--labels", str(first), "--labels", str(second))
    assert again.exit_code == 0, again.output
    assert "1 labels changed, 1 splits changed, 0 other data-set fields changed, 2 unchanged" in (
        again.output
    )
    with open_store(url) as store:
        frame = store.dataset_frame().set_index("dataset_path")
    assert frame.loc[c, "split"] == "valid" and frame.loc[c, "Edema"] == 1.0
    assert frame.loc[str(archive / "train/p2/s1/b.jpg"), "Pleural Effusion"] == -1.0
    assert frame.loc[str(archive / "train/p1/s1/a.jpg"), "split"] == "train"


def test_a_labels_file_that_is_neither_format_is_refused(tmp_path, test_encoders):
    write_jpeg(tmp_path / "a" / "x.jpg", 1)
    bad = tmp_path / "bad.csv"
    bad.write_text("File,Finding\nx.jpg,1\n")
    result = ingest(str(tmp_path / "a"), "--db", f"sqlite:///{tmp_path / 's.sqlite'}",
                    "--labels", str(bad))  # fmt: skip
    assert result.exit_code == 2
    assert "neither a CheXpert-format CSV" in " ".join(result.output.split())


def test_migration_0004_derives_the_view_group_of_stored_images(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    config = Config()
    config.set_main_option("script_location", str(migrations_folder(StoreConfig(url=url))))
    config.set_main_option("sqlalchemy.url", url)
    command.upgrade(config, "0003")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO studies (id, study_uid) VALUES (1, '1.2.3')")
        for i, view in enumerate(("PA", "ll", "LATERAL", "AP", None, "OBLIQUE"), start=1):
            conn.exec_driver_sql(
                "INSERT INTO images (id, sop_uid, study_id, pixel_sha256, view_position, "
                "ingested_at) VALUES (?, ?, 1, 'x', ?, '2026-01-01 00:00:00')",
                (i, f"1.2.3.{i}", view),
            )
    engine.dispose()
    with open_store(url) as store:
        groups = store.dataset_frame()["view_group"].to_dict()
        with store.engine.connect() as conn:
            stored = dict(conn.exec_driver_sql("SELECT id, view_group FROM images").all())
    assert stored == {1: "frontal", 2: "lateral", 3: "lateral", 4: "frontal", 5: None, 6: None}
    assert groups == {1: "frontal", 2: "lateral", 3: "lateral", 4: "frontal", 5: "", 6: ""}
