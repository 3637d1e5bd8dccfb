"""The archive density: fitted on demand, saved per store generation, reused, refitted when the
archive moved, stale fits flagged, OOD queries flagged in the search result, JSON and audit."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import vonmises_fisher

from chexretrieve.audit import AuditLog
from chexretrieve.density import (
    OOD_MESSAGE,
    ArchiveDensityProvider,
    DensityConfig,
    DensityUnavailable,
    QueryDensity,
)
from chexretrieve.density.archive import ArchiveDensity, saved_revisions
from chexretrieve.density.rarity import rare_cases
from chexretrieve.findings import FINDINGS
from chexretrieve.search.config import SearchConfig
from chexretrieve.search.gallery import Gallery
from chexretrieve.search.output import result_as_dict
from chexretrieve.search.service import AnchorSetRef, SearchRequest, SearchService

D = 24


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


#: two archive "concepts": cluster A (Cardiomegaly-positive) and cluster B (Pleural Effusion)
CENTRES = _unit(np.eye(D)[:2] + 0.05)


def _gallery(n_a=150, n_b=90, seed=0, first_id=1, rare=()):
    rng = np.random.default_rng(seed)
    a = vonmises_fisher(CENTRES[0], 200.0).rvs(n_a, random_state=rng)
    b = vonmises_fisher(CENTRES[1], 200.0).rvs(n_b, random_state=rng)
    emb = np.vstack([a, b, *rare]).astype(np.float32)
    n = len(emb)
    ids = np.arange(first_id, first_id + n, dtype=np.int64)
    meta = pd.DataFrame(
        {
            "study_uid": [f"1.2.{i}" for i in ids],
            "view_position": "PA",
            "patient_sex": "F",
            "patient_age_years": 50.0,
            "study_date": dt.date(2020, 1, 1),
            "split": "train",
        },
        index=ids,
    )
    labels = pd.DataFrame(np.nan, index=ids, columns=list(FINDINGS))
    labels.iloc[:n_a, FINDINGS.index("Cardiomegaly")] = 1.0
    labels.iloc[n_a : n_a + n_b, FINDINGS.index("Cardiomegaly")] = 0.0
    labels.iloc[n_a : n_a + n_b, FINDINGS.index("Pleural Effusion")] = 1.0
    labels.iloc[:n_a, FINDINGS.index("Pleural Effusion")] = 0.0
    return Gallery("fake:1", ids, emb, meta, labels)


class FakeStore:
    label = "sqlite:///fake.sqlite"

    def __init__(self):
        self.revision = 7

    def archive_revision(self):
        return self.revision


class FakeAnchors:
    def anchor_set(self, finding, key):
        if finding == "Cardiomegaly":
            sentences, vectors = ("enlarged heart", "normal heart size"), [CENTRES[0], -CENTRES[0]]
        elif finding == "Pleural Effusion":
            sentences, vectors = ("fluid in the pleural space",), [CENTRES[1]]
        else:
            raise ValueError("no anchor set")
        return AnchorSetRef(f"{finding}@v1", "h", sentences, np.array(vectors, np.float32))

    def broad_prior(self):
        raise AssertionError("not used")


def _provider(tmp_path, store=None, **settings):
    config = DensityConfig(cache_dir=tmp_path / "density", **settings)
    return ArchiveDensityProvider(store or FakeStore(), "fake:1", config, FakeAnchors())


def test_first_assessment_fits_saves_and_a_new_provider_reuses_the_file(tmp_path, monkeypatch):
    gallery = _gallery()
    first = _provider(tmp_path)
    typical = first.assess(gallery.embeddings[3], gallery)
    assert isinstance(typical, QueryDensity)
    assert not typical.ood and not typical.stale and typical.percentile > 5
    assert typical.n_components >= 2 and typical.revision == 7
    files = saved_revisions(tmp_path / "density", FakeStore.label, "fake:1")
    assert [r for r, _ in files] == [7]
    second = _provider(tmp_path)
    monkeypatch.setattr(second, "fit", lambda g: pytest.fail("a saved current fit was refitted"))
    again = second.assess(gallery.embeddings[3], gallery)
    assert again.log_density == pytest.approx(typical.log_density)


def test_an_unlike_query_is_flagged_and_a_typical_one_is_not(tmp_path):
    gallery = _gallery()
    provider = _provider(tmp_path, ood_model="movmf")  # this archive is a true vMF mixture
    far = _unit(np.eye(D)[5] + 0.05)
    between = _unit(CENTRES[0] + CENTRES[1])
    for query in (far, between):
        out = provider.assess(query, gallery)
        assert out.ood and out.message == OOD_MESSAGE
        assert out.percentile == 0.0 and out.log_density < out.threshold
    # the default Gaussian flags the far query too, but not the one between the two clusters
    # (the known-answer vMF world of eval density: there the mixture wins)
    gaussian = _provider(tmp_path / "g")
    assert gaussian.assess(far, gallery).ood and not gaussian.assess(between, gallery).ood
    # held-out typical images: fresh draws from the archive's clusters are rarely flagged
    fresh = _gallery(seed=5)
    flags = [provider.assess(e, gallery).ood for e in fresh.embeddings[::4]]
    assert sum(flags) <= 2


def test_small_drift_uses_the_old_fit_and_says_so_large_drift_refits(tmp_path):
    store = FakeStore()
    gallery = _gallery()
    provider = _provider(tmp_path, store=store)
    provider.assess(gallery.embeddings[0], gallery)
    grown = _gallery(rare=[vonmises_fisher(CENTRES[0], 200.0).rvs(10, random_state=1)])
    store.revision = 8
    out = provider.assess(gallery.embeddings[0], grown)  # 10 of 240: 4 % moved
    assert out.stale and "revision 7" in out.note and "revision 8" in out.note
    assert "chexretrieve density fit" in out.note
    much = _gallery(n_a=150, n_b=200)  # 110 images added: 46 % moved
    store.revision = 9
    meanwhile = provider.assess(gallery.embeddings[0], much)  # never waits for the refit
    assert meanwhile.stale and meanwhile.revision == 7
    assert "over the 10 % refit threshold" in meanwhile.note and "background" in meanwhile.note
    provider.wait_for_background_fit(timeout=120)
    refit = provider.assess(gallery.embeddings[0], much)
    assert not refit.stale and refit.revision == 9 and refit.n_images == 350
    kept = [r for r, _ in saved_revisions(tmp_path / "density", store.label, "fake:1")]
    assert kept == [9, 7]


def test_one_shot_commands_refit_during_the_call(tmp_path):
    from chexretrieve.density.config import FIT_NOW

    store = FakeStore()
    provider = _provider(tmp_path, store=store, background_fit_above=FIT_NOW)
    provider.assess(CENTRES[0], _gallery())
    store.revision = 8
    refit = provider.assess(CENTRES[0], _gallery(n_a=150, n_b=200))
    assert not refit.stale and refit.revision == 8


def test_no_fit_and_fit_on_search_off_says_what_to_run(tmp_path):
    provider = _provider(tmp_path, fit_on_search=False)
    out = provider.assess(CENTRES[0], _gallery())
    assert isinstance(out, DensityUnavailable) and "chexretrieve density fit" in out.note
    tiny = _provider(tmp_path, min_images=500)
    out = tiny.assess(CENTRES[0], _gallery())
    assert isinstance(out, DensityUnavailable) and "min_images" in out.note


def test_a_damaged_file_is_set_aside_and_refitted_not_trusted(tmp_path):
    from chexretrieve.density.config import FIT_NOW

    gallery = _gallery()
    _provider(tmp_path).assess(CENTRES[0], gallery)
    [(_, path)] = saved_revisions(tmp_path / "density", FakeStore.label, "fake:1")
    path.write_bytes(b"not a density")
    with pytest.raises(ValueError, match="not a complete .npz"):
        ArchiveDensity.load(path)
    server = _provider(tmp_path)  # a server: refitted in the background, said meanwhile
    out = server.assess(CENTRES[0], gallery)
    assert isinstance(out, DensityUnavailable)
    assert (
        out.note.startswith("typicality unavailable: rebuilding") and "not a complete" in out.note
    )
    assert [p.name.split("-")[0] for p in (path.parent / "set-aside").iterdir()] == ["revision"]
    server.wait_for_background_fit(timeout=120)
    out = server.assess(CENTRES[0], gallery)
    assert isinstance(out, QueryDensity) and not out.stale and not out.note
    ArchiveDensity.load(path)  # replaced by a readable fit
    path.write_bytes(b"")
    command = _provider(tmp_path, background_fit_above=FIT_NOW)  # a one-shot command: now
    out = command.assess(CENTRES[0], gallery)
    assert (
        isinstance(out, QueryDensity) and "empty (0 bytes)" in out.note and "refitted" in out.note
    )


def test_components_are_named_by_anchor_sentences_and_dominant_labels(tmp_path):
    gallery = _gallery()
    density = _provider(tmp_path).fit(gallery)
    names = {c.labels: c for c in density.components if c.labels}
    assert ("Cardiomegaly",) in names and ("Pleural Effusion",) in names
    assert names[("Cardiomegaly",)].sentences[0] == "Cardiomegaly: enlarged heart"
    assert names[("Pleural Effusion",)].sentences[0].startswith("Pleural Effusion: fluid")
    out = _provider(tmp_path).assess(gallery.embeddings[0], gallery)
    assert out.concepts and out.concepts[0].name.labels == ("Cardiomegaly",)
    assert sum(c.posterior for c in out.concepts) >= 0.9


def test_rare_cases_come_first(tmp_path):
    odd = _unit(np.eye(D)[7:10] + 0.3)
    gallery = _gallery(rare=[odd])
    rows, note = rare_cases(_provider(tmp_path), gallery, 3)
    assert {r["case"] for r in rows} == set(gallery.image_ids[-3:].tolist())
    assert rows[0]["log_density"] <= rows[1]["log_density"] <= rows[2]["log_density"]
    assert note == ""


class _Encoder:
    encoder_id = "fake:1"
    inv_temperature = 20.0
    embed_dim = D


def test_search_result_json_and_audit_carry_the_flag(tmp_path):
    gallery = _gallery()
    audit = AuditLog(tmp_path / "audit.jsonl")
    service = SearchService(
        lambda: gallery,
        FakeAnchors(),
        encoder=_Encoder(),
        config=SearchConfig(feature_cache_dir=tmp_path / "features"),
        audit=audit,
        density=_provider(tmp_path),
    )
    far = _unit(np.eye(D)[5] + 0.05)
    result = service.search(
        SearchRequest(finding="Cardiomegaly", geometry="cosine", image_embedding=far, top_k=3),
        user="dr",
    )
    assert result.density.ood
    payload = json.loads(json.dumps(result_as_dict(result), default=str))
    assert payload["density"]["ood"] is True and payload["density"]["message"] == OOD_MESSAGE
    typical = service.search(
        SearchRequest(finding="Cardiomegaly", geometry="cosine", case_id=4, top_k=3, explain=True),
        user="dr",
    )
    assert not typical.density.ood
    assert all(hit.concepts for hit in typical.hits)  # --explain: every result's decomposition
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [r["density"]["ood"] for r in records] == [True, False]
    assert records[0]["density"]["percentile"] == 0.0


def test_the_case_pickers_rare_cases_first_order(tmp_path):
    from chexretrieve.ui.handlers import CaseLookup
    from chexretrieve.ui.rare_cases import RARE_FIRST

    odd = _unit(np.eye(D)[7:10] + 0.3)
    gallery = _gallery(rare=[odd])
    service = SearchService(
        lambda: gallery,
        FakeAnchors(),
        encoder=_Encoder(),
        config=SearchConfig(feature_cache_dir=tmp_path / "features"),
        density=_provider(tmp_path),
    )
    lookup = CaseLookup(service, thumbnail_px=32, case_page_size=3)
    first = lookup.case_page(finding="Cardiomegaly", status=RARE_FIRST)
    assert {i for _, i in first.choices} == set(gallery.image_ids[-3:].tolist())
    assert first.total == len(gallery) and "rarest first" in first.summary
    density = service.density.held()
    assert [i for _, i in first.choices] == density.rarity_order()[:3].tolist()
    second = lookup.case_page(finding="Cardiomegaly", status=RARE_FIRST, page=1)
    assert [i for _, i in second.choices] == density.rarity_order()[3:6].tolist()
    details = lookup.result_details(5, finding="Cardiomegaly")
    assert "Archive cluster (archive density)" in details and "Cardiomegaly" in details
    narrowed = lookup.case_page(text="24", finding="Cardiomegaly", status=RARE_FIRST)
    assert {i for _, i in narrowed.choices} <= {24, 240, 241, 242, 243}
    off = CaseLookup(
        SearchService(lambda: gallery, FakeAnchors(), encoder=_Encoder(),
                      config=SearchConfig(feature_cache_dir=tmp_path / "f2")),
    )  # fmt: skip
    with pytest.raises(ValueError, match="needs the archive density"):
        off.case_page(status=RARE_FIRST)


def test_a_large_archive_is_fitted_on_a_seeded_sample_and_every_image_scored(tmp_path):
    gallery = _gallery()
    sampled = _provider(tmp_path / "a", fit_sample=60).fit(gallery)
    again = _provider(tmp_path / "b", fit_sample=60).fit(gallery)
    full = _provider(tmp_path / "c").fit(gallery)
    assert sampled.n_images == len(gallery) and sampled.log_density.shape == (len(gallery),)
    assert len(sampled.reference) == 12  # the held-out 20 % of the 60-image sample
    np.testing.assert_array_equal(sampled.model.directions, again.model.directions)
    assert len(full.reference) == 48


def test_a_large_archive_is_fitted_in_the_background_and_says_so_meanwhile(tmp_path):
    gallery = _gallery()
    provider = _provider(tmp_path, background_fit_above=100)
    first = provider.assess(gallery.embeddings[0], gallery)
    assert isinstance(first, DensityUnavailable) and "being fitted in the background" in first.note
    provider.wait_for_background_fit(timeout=120)
    later = provider.assess(gallery.embeddings[0], gallery)
    assert isinstance(later, QueryDensity) and not later.ood and not later.stale


def test_an_unwritable_cache_never_breaks_a_search(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    config = DensityConfig(cache_dir=blocker / "density")
    provider = ArchiveDensityProvider(FakeStore(), "fake:1", config, FakeAnchors())
    gallery = _gallery()
    out = provider.assess(gallery.embeddings[0], gallery)
    assert isinstance(out, QueryDensity) and not out.ood
    assert "could not be saved" in out.note and "memory only" in out.note
    again = provider.assess(gallery.embeddings[1], gallery)  # held in memory: no refit
    assert again.revision == out.revision


def test_a_failed_background_fit_is_reported_not_retried_on_every_search(tmp_path, monkeypatch):
    gallery = _gallery()
    provider = _provider(tmp_path, background_fit_above=100)
    calls = []

    def broken(g):
        calls.append(1)
        raise MemoryError("no memory for the responsibilities")

    monkeypatch.setattr(provider, "fit", broken)
    provider.assess(CENTRES[0], gallery)
    provider.wait_for_background_fit(timeout=60)
    out = provider.assess(CENTRES[0], gallery)
    again = provider.assess(CENTRES[0], gallery)
    assert isinstance(out, DensityUnavailable) and "MemoryError" in out.note
    assert "chexretrieve density fit" in again.note and calls == [1]


def test_the_gaussian_ood_model_flags_saves_and_reloads(tmp_path, monkeypatch):
    from chexretrieve.geometry.density_baselines import GaussianDensity

    gallery = _gallery()
    provider = _provider(tmp_path, ood_model="gaussian")
    far = _unit(np.eye(D)[5] + 0.05)
    out = provider.assess(far, gallery)
    assert out.ood and out.ood_model == "gaussian" and out.percentile == 0.0
    expected = GaussianDensity.fit(gallery.embeddings).log_density(far[None, :])[0]
    assert out.log_density == pytest.approx(expected, rel=1e-6)  # float32 rows renormalised
    assert not provider.assess(gallery.embeddings[3], gallery).ood
    again = _provider(tmp_path, ood_model="gaussian")
    monkeypatch.setattr(again, "fit", lambda g: pytest.fail("a saved current fit was refitted"))
    reloaded = again.assess(far, gallery)
    assert reloaded.log_density == pytest.approx(out.log_density) and reloaded.ood
    assert reloaded.concepts  # the decomposition stays the mixture's
    with pytest.raises(ValueError, match="unknown OOD model"):
        DensityConfig(ood_model="flow")


def test_a_fit_made_under_other_settings_is_not_reused(tmp_path):
    gallery = _gallery()
    first = _provider(tmp_path, ood_model="movmf").assess(CENTRES[0], gallery)
    assert first.ood_model == "movmf"
    switched = _provider(tmp_path, ood_model="gaussian").assess(CENTRES[0], gallery)
    assert switched.ood_model == "gaussian" and not switched.stale
    back = _provider(tmp_path, ood_model="movmf").assess(CENTRES[0], gallery)  # refitted again
    assert back.ood_model == "movmf"
