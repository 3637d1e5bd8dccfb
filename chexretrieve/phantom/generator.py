"""`generate_case`: one phantom chest radiograph with its labels, truth, report and metadata."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from chexretrieve.findings import FINDINGS
from chexretrieve.phantom import report as rep
from chexretrieve.phantom.anatomy import Anatomy, Layers, draw_anatomy
from chexretrieve.phantom.canvas import (
    Frame,
    bank_view,
    glyph,
    mottle_bank,
    noise_bank,
    upsample2,
)
from chexretrieve.phantom.config import PhantomConfig
from chexretrieve.phantom.sampling import (
    age_on,
    apply_overrides,
    patient_of,
    sample_attributes,
    sample_nuisance,
    sample_truth,
    stream,
    study_date,
    study_stream,
)
from chexretrieve.phantom.signs import adjust_anatomy, draw_signs

_STREAM_RENDER, _STREAM_REPORT = 10, 11
#: every phantom says it is one
SYNTHETIC_NOTE = "SYNTHETIC PHANTOM - not a patient"
DEFAULT_CONFIG = PhantomConfig()


@dataclass
class PhantomCase:
    """One synthetic frontal chest radiograph and everything known about it."""

    seed: int
    index: int
    image: np.ndarray  # float32 (size, size) in [0, 1], 0 = black (MONOCHROME2 look)
    labels: dict[str, float]  # CheXpert-style reported labels: 1, 0, -1 or nan (blank)
    truth: dict[str, bool]  # true presence of each finding
    report: str
    sentences: list[str]
    nuisance: dict[str, object]
    metadata: dict[str, object]
    attributes: dict[str, dict] = field(default_factory=dict)  # side/severity/location per finding

    @property
    def no_finding(self) -> bool:
        """CheXpert 'No Finding': no pathology labelled positive or uncertain (devices allowed)."""
        return all(
            math.isnan(v) or v == 0.0
            for name, v in self.labels.items()
            if name != "Support Devices"
        )


def _check_index(seed: int, index: int) -> None:
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"the seed must be a non-negative integer, got {seed!r}")
    if not isinstance(index, (int, np.integer)) or index < 0:
        raise ValueError(f"the case index must be a non-negative integer, got {index!r}")


def generate_case(
    seed: int,
    index: int,
    config: PhantomConfig = DEFAULT_CONFIG,
    overrides: Mapping[str, bool] | None = None,
) -> PhantomCase:
    """The phantom case `index` of the world `seed`; identical for identical arguments.

    `overrides` forces findings on or off ({'Pleural Effusion': True}); everything else about the
    case (anatomy, pose, exposure, noise, metadata, other findings) stays the same.
    """
    return _build(seed, index, config, overrides, with_image=True)


def describe_case(
    seed: int,
    index: int,
    config: PhantomConfig = DEFAULT_CONFIG,
    overrides: Mapping[str, bool] | None = None,
) -> PhantomCase:
    """`generate_case` without drawing the image (`image` is an empty 0 x 0 array): labels,
    truth, report, nuisance and metadata are identical to generate_case's, at a fraction of
    the cost."""
    return _build(seed, index, config, overrides, with_image=False)


def _build(seed, index, config, overrides, with_image: bool) -> PhantomCase:
    _check_index(seed, index)
    seed, index = int(seed), int(index)
    patient = patient_of(seed, index, config)
    rng = study_stream(seed, index)
    ap = bool(rng.random() < config.ap_fraction)
    truth, isolated = sample_truth(rng, patient, ap, config)
    nuisance = sample_nuisance(rng, patient, ap, config.nuisance_scale)
    truth, isolated = apply_overrides(truth, isolated, dict(overrides) if overrides else None)
    attrs = sample_attributes(seed, index, truth, isolated, patient)
    if with_image:
        image = render(seed, index, config, nuisance, attrs, patient.sex)
    else:
        image = np.zeros((0, 0), np.float32)
    labels, sentences = write_report(seed, index, config, truth, attrs, nuisance, patient)
    day = study_date(seed, patient)
    metadata = {
        "patient_id": patient.patient_id,
        "patient_name": f"PHANTOM^{patient.patient_index:07d}",
        "patient_index": patient.patient_index,
        "study_number": patient.study_number,
        "sex": patient.sex,
        "birth_date": patient.birth_date.isoformat(),
        "age": age_on(patient.birth_date, day),
        "study_date": day.isoformat(),
        "view": nuisance["view"],
        "split": patient.split,
        "synthetic": SYNTHETIC_NOTE,
    }
    return PhantomCase(
        seed=seed,
        index=index,
        image=image,
        labels=labels,
        truth=truth,
        report=" ".join(sentences),
        sentences=sentences,
        nuisance=nuisance,
        metadata=metadata,
        attributes=attrs,
    )


def generate_batch(
    seed: int, indices: Iterable[int], config: PhantomConfig = DEFAULT_CONFIG
) -> list[PhantomCase]:
    """`generate_case` for several indices (texture banks are shared through a cache)."""
    return [generate_case(seed, i, config) for i in indices]


def _anatomy(nuisance: Mapping, attrs: dict[str, dict], sex: str, rng) -> Anatomy:
    ap = nuisance["view"] == "AP"
    body = float(nuisance["body_size"])
    insp = float(nuisance["inspiration"])
    a = Anatomy()
    a.lung_scale = 0.94 + 0.1 * (body - 1.0) + rng.uniform(-0.02, 0.02)
    a.body_half_width = 0.86 * a.lung_scale + 0.06 + 0.35 * (body - 0.85)
    a.soft_density = 0.7 + 0.25 * (body - 0.85)
    a.dome = (0.42 - 0.09 * insp + rng.uniform(-0.02, 0.02), 0.47 - 0.09 * insp)
    hx, hy = a.heart_center
    a.heart_center = (hx + rng.uniform(-0.02, 0.02), hy - 0.05 * insp)
    ha, hb = a.heart_axes
    mag = 1.08 if ap else 1.0
    a.heart_axes = (ha * mag * (1 - 0.04 * insp), hb * mag)
    a.spine_x = float(nuisance["patient_rotation"])
    a.rib_spacing = 0.118 * (1 + 0.05 * insp)
    a.rib_phase = rng.uniform(-0.02, 0.02)
    a.clavicle_lift = 0.08 if ap else 0.0
    a.scapula_overlap = 1.0 if ap else 0.0
    a.breast = float(rng.uniform(0.03, 0.1)) if sex == "F" else 0.0
    a.gastric_bubble = float(rng.uniform(0.0, 1.0))
    a.vessel_atlas = int(rng.integers(0, 4))
    a.vessel_density = float(rng.uniform(0.18, 0.25))
    adjust_anatomy(a, attrs)
    return a


def render(
    seed: int,
    index: int,
    config: PhantomConfig,
    nuisance: Mapping,
    attrs: dict[str, dict],
    sex: str,
) -> np.ndarray:
    """Draw the radiograph for the sampled nuisance factors and finding attributes."""
    size = config.size
    rng = stream(seed, _STREAM_RENDER, index)
    anatomy = _anatomy(nuisance, attrs, sex, rng)
    angle = math.radians(float(nuisance["rotation_deg"]))
    shift = nuisance["crop_shift"]
    zoom, offset = 1.02 / float(nuisance["crop_zoom"]), (shift[0], shift[1] + 0.04)
    hi = Frame(size, zoom, angle, offset)
    # smooth fields at half resolution where that maps exactly onto the output grid
    lo = Frame(size // 2, zoom, angle, offset) if size % 2 == 0 and size >= 192 else hi
    layers = Layers(hi, lo)
    draw_anatomy(anatomy, layers)

    def seed_of(name: str) -> np.random.Generator:
        return stream(seed, _STREAM_RENDER, index, 1 + FINDINGS.index(name))

    draw_signs(anatomy, layers, attrs, seed_of)
    return compose(layers, anatomy, nuisance, rng)


def compose(layers: Layers, anatomy: Anatomy, nuisance: Mapping, rng) -> np.ndarray:
    """Turn the layers into a displayed radiograph (exposure, contrast, noise, marker)."""
    size, small = layers.hi.size, layers.lo.size
    fill = np.minimum(layers.fill, np.float32(1.0))
    air = layers.lung * (1.0 - fill)
    mottle = bank_view(mottle_bank(small), small, rng)
    attenuation = layers.soft - air * (0.5 + 0.015 * mottle)
    attenuation -= layers.lucent
    attenuation += fill * layers.lung * np.float32(0.04)
    attenuation += layers.dense
    vessels = layers.vessels * layers.markings
    vessels *= 1.0 - 0.6 * fill
    vessels *= np.float32(anatomy.vessel_density)
    attenuation += vessels
    if small != size:
        attenuation = upsample2(attenuation)
    if layers.has_lines:
        attenuation += layers.lines * np.float32(0.25)
    exposure, contrast = float(nuisance["exposure"]), float(nuisance["contrast"])
    image = np.exp(attenuation * np.float32(-1.6 * contrast))
    # 1 - exp(-mu A), shifted and scaled by the exposure
    image *= np.float32(-1.12 / exposure)
    image += np.float32(0.95 * 1.12 / exposure)
    noise = float(nuisance["noise"])
    if noise > 0:
        image += bank_view(noise_bank(size), size, rng) * np.float32(noise)
    np.clip(image, np.float32(0.0), np.float32(1.0), out=image)
    if layers.has_metal:
        # radio-opaque devices push towards white whatever lies behind them
        image += (1.0 - image) * (layers.metal * np.float32(0.92))
    _marker(image, nuisance, size)
    return image.astype(np.float32, copy=False)


def _marker(image: np.ndarray, nuisance: Mapping, size: int) -> None:
    letter = glyph(str(nuisance["marker"]), max(1, size // 80))
    h, w = letter.shape
    r0 = max(2, size // 20)
    c0 = r0 if nuisance["marker_corner"] == "left" else size - r0 - w
    block = image[r0 : r0 + h, c0 : c0 + w]
    np.maximum(block, letter * 0.95, out=block)


class _LazyStream:
    """A random stream created on first use (most findings of a report need none)."""

    def __init__(self, *key: int):
        self.key = key
        self.rng: np.random.Generator | None = None

    def __getattr__(self, name: str):
        if self.rng is None:
            self.rng = stream(*self.key)
        return getattr(self.rng, name)


def write_report(seed, index, config, truth, attrs, nuisance, patient):
    """The report sentences and the labels they imply."""
    rng = stream(seed, _STREAM_REPORT, index)
    prior = patient.study_number > 0
    positives: list[rep.Mention] = []
    hedged: list[rep.Mention] = []
    negated: list[str] = []
    modes = rng.random(len(FINDINGS))
    for k, name in enumerate(FINDINGS):
        u = float(modes[k])
        frng = _LazyStream(seed, _STREAM_REPORT, index, k + 1)
        present = truth[name]
        if name == "Lung Opacity" and present and not attrs[name].get("isolated"):
            # the cause's sentence names the opacity
            continue
        if present:
            if u < config.uncertain_rate and name != "Support Devices":
                hedged += rep.hedged_mentions(name, attrs[name], frng)
            elif u < config.uncertain_rate + 0.03:
                continue
            else:
                positives += rep.positive_mentions(name, attrs[name], frng, prior)
        else:
            if u < config.negative_mention_rate:
                negated.append(name)
            elif u < config.negative_mention_rate + 0.02 and name != "Support Devices":
                hedged += rep.hedged_mentions(name, {"side": "right" if u < 0.5 else "left"}, frng)
    # opacity causes present but reported otherwise: the opacity itself cannot be negated
    if truth["Lung Opacity"]:
        negated = [n for n in negated if n != "Lung Opacity"]
    order = rng.permutation(len(positives)) if rng.random() < 0.3 else range(len(positives))
    sentences: list[rep.Mention] = []
    header = rep.header_sentence(str(nuisance["view"]), rng)
    if header:
        sentences.append((header, {}))
    sentences += [positives[i] for i in order]
    sentences += hedged
    sentences += rep.negative_mentions(negated, rng)
    if not positives and not hedged:
        sentences.append((rep.normal_sentence(rng), {}))
    labels = rep.aggregate_labels(sentences)
    return labels, [text for text, _ in sentences]
