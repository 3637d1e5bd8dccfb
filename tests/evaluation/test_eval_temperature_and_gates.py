"""The temperature experiment, the report diagnostics and the encoder gates, against naive
references; the phantom source's disjoint-world refusal and true validation labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from eval_fakes import toy_world

from chexretrieve.evaluation.config import (
    IntervalConfig,
    PhantomSourceConfig,
    ProtocolConfig,
    TemperatureConfig,
)
from chexretrieve.evaluation.gates import direction_average_precision, effective_dimension
from chexretrieve.evaluation.temperature import (
    anchor_cosine_spread,
    posterior_subspaces,
    subspace_overlap,
    temperature_experiment,
    variant_spread,
)


def test_anchor_cosine_spread_is_the_mean_per_image_standard_deviation():
    archive, view = toy_world(n_train=20, n_valid=6, dim=8)
    naive = []
    for finding in ("Pleural Effusion", "Cardiomegaly"):
        for variant in view.anchors.findings[finding]:
            for image in view.embeddings.astype(np.float64):
                cosines = [float(image @ a) for a in variant.embeddings.astype(np.float64)]
                naive.append(np.std(cosines))
    spread = anchor_cosine_spread(view, ["Pleural Effusion", "Cardiomegaly"])
    assert spread == pytest.approx(np.mean(naive), rel=1e-6)


def test_temperature_moves_softmax_but_not_cosine_or_gaussian():
    archive, view = toy_world()
    config = TemperatureConfig(inv_temperatures=(0.5, 5.0, 500.0), geometries=(
        "cosine", "softmax", "gaussian"))  # fmt: skip
    frame = temperature_experiment(
        archive, [view], config, ProtocolConfig(), IntervalConfig(n_bootstrap=50),
        ["Pleural Effusion", "Cardiomegaly"], show_progress=False,
    )  # fmt: skip
    grid = sorted({0.5, 5.0, 500.0, view.inv_temperature})
    assert sorted(set(frame["inv_temperature"])) == grid  # the encoder's own inv_t is added
    by = frame.pivot_table(index="inv_temperature", columns="geometry", values="mean")
    assert by["cosine"].nunique() == 1 and np.ptp(by["gaussian"]) < 1e-12
    assert np.ptp(by["softmax"]) > 1e-3
    assert (frame["sharpness"] == frame["inv_temperature"] * frame["spread"]).all()
    assert (frame["low"] <= frame["mean"]).all() and (frame["mean"] <= frame["high"]).all()


def test_variant_spread_matches_a_hand_computation():
    rows = []
    for variant, (soft, cos) in {"a": (0.5, 0.25), "b": (0.75, 0.25), "c": (0.25, 0.25)}.items():
        for query, offset in (("q1", 0.0), ("q2", 0.1)):
            rows.append(("F", "ck", variant, "softmax", query, soft + offset))
            rows.append(("F", "ck", variant, "cosine", query, cos + offset))
    frame = pd.DataFrame(
        rows, columns=["finding", "checkpoint", "variant", "geometry", "query", "ap"]
    )
    out = variant_spread(frame, "softmax", "cosine").loc["F"]
    assert out["variants"] == 3
    assert out["min"] == pytest.approx(0.0) and out["max"] == pytest.approx(0.5)
    assert out["mean"] == pytest.approx(0.25) and out["std"] == pytest.approx(0.25)


def test_subspace_overlap_of_coordinate_axes():
    eye = np.eye(5)
    assert subspace_overlap(eye[:, :2], eye[:, :3]) == pytest.approx(1.0)
    assert subspace_overlap(eye[:, :2], eye[:, 2:]) == pytest.approx(0.0)
    assert subspace_overlap(eye[:, :2], eye[:, 1:3]) == pytest.approx(0.5)


def test_posterior_k_by_the_variance_rule_follows_the_targets():
    """With the paper's beta (epsilon = 1e-8) the targets dominate the Bingham matrix: the rule
    keeps about the targets' own directions, and they lie in the targets' PCA."""
    archive, view = toy_world(dim=16)
    frame = posterior_subspaces(
        [view], ["Pleural Effusion"], counts=(2, 6), repeats=2, seed=0, inv_temperature=10.0
    )
    two = frame.set_index("n_targets").loc[2]
    assert two["k_mean"] == 1 and two["target_rank"] == 1
    assert two["overlap_target_pca"] == pytest.approx(1.0, abs=1e-6)


def test_effective_dimension_of_known_variances():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(10, 10)))[0]
    # variances 10, 5, 4, 1 and tiny: 95% of 20 needs 10 + 5 + 4 = 19 -> 3 components
    scores = rng.normal(size=(4000, 4)) * np.sqrt([10.0, 5.0, 4.0, 1.0])
    scores -= scores.mean(axis=0)
    scores = np.linalg.qr(scores)[0] * np.sqrt(np.array([10.0, 5.0, 4.0, 1.0]) * 4000)
    points = scores @ basis[:4] + 3.0
    assert effective_dimension(points, 0.95) == 3
    assert effective_dimension(points, 0.99) == 4


def test_direction_ap_is_the_ap_of_one_ranking_for_every_query():
    labels = pd.DataFrame({"Pleural Effusion": [1.0, 0.0, 1.0, 0.0, -1.0, 1.0, 1.0]})
    splits = np.array(["train"] * 5 + ["valid"] * 2)
    from chexretrieve.evaluation.protocol import LabelledArchive

    archive = LabelledArchive(np.array([f"i{k}" for k in range(7)]), splits, labels)
    # keys 0..3 (key 4 is uncertain, dropped); scores along axis 0: 0.9, 0.8, 0.1, 0.5
    emb = np.array([[0.9, 0], [0.8, 0], [0.1, 0], [0.5, 0], [1.0, 0], [0, 1], [0, 1]])
    ap = direction_average_precision(
        archive, emb, {"Pleural Effusion": np.array([1.0, 0.0])}, ProtocolConfig()
    )
    # ranking: key0 (rel), key1, key3, key2 (rel): AP = (1/1 + 2/4) / 2
    assert ap["Pleural Effusion"] == pytest.approx(0.75)


class _StandIn:
    """An encoder that records the world it was trained on, and embeds pixels crudely."""

    encoder_id, inv_temperature = "stand-in:2", 20.0

    def __init__(self, trained_seed: int):
        self.provenance = {"generator": {"seed": trained_seed, "split": "train"}}

    def embed_images(self, images):
        x = np.stack([np.resize(im[::40, ::40].ravel(), 16) for im in images]) + 1e-3
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    def embed_texts(self, texts):
        x = np.stack([np.resize(np.frombuffer(t.encode() * 4, np.uint8)[:16], 16) for t in texts])
        return (x + 1.0) / np.linalg.norm(x + 1.0, axis=1, keepdims=True)


def test_phantom_source_refuses_the_encoders_training_world(tmp_path, monkeypatch):
    import chexretrieve.encoders as encoders
    from chexretrieve.evaluation.phantom_source import phantom_source
    from chexretrieve.evaluation.sources import AnchorTexts

    monkeypatch.setattr(encoders, "load_encoder", lambda spec, config=None: _StandIn(3))
    texts = AnchorTexts({"Pleural Effusion": (("a", ("effusion", "no effusion")),)})
    config = PhantomSourceConfig(n_images=4, seed=3, cache_dir=str(tmp_path), workers=1)
    with pytest.raises(ValueError, match="trained on phantom world seed 3, the same world"):
        phantom_source(config, texts, show_progress=False)
    assert not any(tmp_path.iterdir())  # refused before any work


def test_phantom_validation_queries_carry_the_true_labels(tmp_path, monkeypatch):
    import chexretrieve.encoders as encoders
    from chexretrieve.evaluation.phantom_source import phantom_source
    from chexretrieve.evaluation.sources import AnchorTexts
    from chexretrieve.findings import FINDINGS
    from chexretrieve.phantom import PhantomConfig, describe_case
    from chexretrieve.phantom.splits import split_indices

    monkeypatch.setattr(encoders, "load_encoder", lambda spec, config=None: _StandIn(1))
    texts = AnchorTexts({"Pleural Effusion": (("a", ("effusion", "no effusion")),)})
    first_valid = split_indices(0, "valid", 1, PhantomConfig())[0]
    n = first_valid + 1
    archive, _ = phantom_source(
        PhantomSourceConfig(n_images=n, seed=0, cache_dir="", workers=1), texts,
        show_progress=False,
    )  # fmt: skip
    reported, _ = phantom_source(
        PhantomSourceConfig(n_images=n, seed=0, cache_dir="", workers=1,
                            validation_labels="reported"),
        texts, show_progress=False,
    )  # fmt: skip
    row = n - 1
    assert archive.splits[row] == "valid"
    case = describe_case(0, first_valid)
    for finding in FINDINGS:
        assert archive.labels.loc[row, finding] == float(bool(case.truth[finding]))
        expected = case.labels.get(finding, np.nan)
        got = reported.labels.loc[row, finding]
        assert (np.isnan(expected) and np.isnan(got)) or got == expected
    # training-split keys keep the report-derived labels either way
    train = archive.splits == "train"
    pd.testing.assert_frame_equal(archive.labels[train], reported.labels[train])


def _gates(encoder_id: str, direction: float, image: float, auroc: float):
    from chexretrieve.evaluation.gates import Gates

    findings = ["Edema", "Cardiomegaly"]
    return Gates(
        encoder_id=encoder_id,
        world="a toy world",
        zero_shot=pd.DataFrame({"auroc_truth": [auroc, auroc], "positives": [3, 4]}, findings),
        direction_ap=pd.DataFrame({'"{}" - "no {}"': [direction, direction]}, findings),
        image_ap=pd.DataFrame({"cosine": [image - 0.1] * 2, "gaussian": [image] * 2}, findings),
        effective_dimension=20,
        embed_dim=128,
        inv_temperature=25.0,
        cosine_spread=0.1,
    )


def test_the_gates_page_of_several_encoders_has_a_summary_with_their_spread(monkeypatch):
    from types import SimpleNamespace

    from chexretrieve.evaluation.gates import gates_page

    def encoder(seed):
        return SimpleNamespace(
            provenance={"generator": {"seed": seed, "size": 256, "prevalence": 2.0}},
            encoder_id=f"phantom:{seed:012d}",
        )

    measured = [
        (encoder(1), _gates("phantom:000000000001", 0.40, 0.44, 0.82)),
        (encoder(3), _gates("phantom:000000000003", 0.45, 0.43, 0.84)),
    ]
    monkeypatch.setattr("chexretrieve.phantom.zero_shot.describe_encoder", lambda e: e.encoder_id)
    monkeypatch.setattr("chexretrieve.phantom.zero_shot.generator_status", lambda p: "same")
    page = gates_page(measured, "chexretrieve phantom gates --weights a --weights b")
    assert "## Summary" in page and page.count("## Encoder `phantom:") == 2
    first = "| `phantom:000000000001` (training world 1) | 0.820 | 0.400 | 0.440 | +0.040 | yes |"
    second = "| `phantom:000000000003` (training world 3) | 0.840 | 0.450 | 0.430 | -0.020 | NO |"
    assert first in page and second in page
    # mean [min, max] over the encoders, and how many pass every gate
    assert "| **mean [min, max]** | 0.830 [0.820, 0.840] | 0.425 [0.400, 0.450] |" in page
    assert "| 1 of 2 |" in page
