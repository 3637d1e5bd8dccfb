"""The random world behind a phantom: patients, studies, true findings with their attributes
(side, severity, location) and nuisance factors. Pure numpy; deterministic in (seed, index).

Every random stream is keyed by (seed, purpose, index[, finding]) so that forcing one finding on or
off (`overrides`) leaves every other finding, the nuisance factors and the metadata unchanged.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from chexretrieve.findings import FINDINGS, canonical_finding
from chexretrieve.phantom.config import PhantomConfig

#: the findings whose presence makes "Lung Opacity" true (the CheXpert umbrella)
OPACITY_CAUSES = ("Consolidation", "Pneumonia", "Edema", "Atelectasis", "Lung Lesion")
#: consecutive indices are grouped into blocks of this many images, shared among a few patients
PATIENT_BLOCK = 16
_STREAM_PATIENT_BLOCK, _STREAM_PATIENT, _STREAM_STUDY, _STREAM_FINDING = 0, 1, 2, 3
_STREAM_CHRONIC = 4
_EPOCH = dt.date(2012, 1, 1)


def stream(seed: int, purpose: int, index: int, sub: int = 0) -> np.random.Generator:
    """An independent random generator for one purpose of one case, keyed by
    (seed, purpose, index, sub) through numpy's SeedSequence."""
    return np.random.Generator(np.random.PCG64([int(seed), purpose, int(index), sub]))


@dataclass(frozen=True)
class Patient:
    patient_index: int  # unique within a seed's world
    study_number: int  # 0 for the patient's first image, 1 for the second, ...
    patient_id: str
    sex: str
    birth_date: dt.date
    split: str  # "train" or "valid"
    body_size: float
    chronic: frozenset[str]  # findings that persist across this patient's studies


def patient_of(seed: int, index: int, config: PhantomConfig) -> Patient:
    """The patient an image belongs to: each block of 16 indices is shared by 1-image and
    multi-image patients, so some patients have several studies."""
    block, offset = divmod(index, PATIENT_BLOCK)
    starts = _block_starts(seed, block)
    start = max(s for s in starts if s <= offset)
    first = block * PATIENT_BLOCK + start
    patient = _patient(seed, first, config.valid_fraction, config.prevalence)
    return dataclasses.replace(patient, study_number=offset - start)


@lru_cache(maxsize=4096)
def _block_starts(seed: int, block: int) -> tuple[int, ...]:
    """First offsets of the patients sharing a block of PATIENT_BLOCK consecutive indices."""
    rng = stream(seed, _STREAM_PATIENT_BLOCK, block)
    sizes = rng.choice([1, 2, 3, 4], size=PATIENT_BLOCK, p=[0.55, 0.2, 0.15, 0.1])
    starts = np.concatenate([[0], np.cumsum(sizes)])
    return tuple(int(v) for v in starts if v < PATIENT_BLOCK)


@lru_cache(maxsize=4096)
def _patient(seed: int, patient_index: int, valid_fraction: float, rates: float) -> Patient:
    prng = stream(seed, _STREAM_PATIENT, patient_index)
    split = "valid" if prng.random() < valid_fraction else "train"
    sex = "F" if prng.random() < 0.48 else "M"
    # age at the first study like a chest X-ray population (mean about 60), 18 to 92 years
    age_years = float(np.clip(prng.normal(60.0, 17.0), 18.0, 92.0))
    birth = first_study_date(seed, patient_index) - dt.timedelta(days=int(age_years * 365.25))
    body = float(np.clip(prng.normal(1.0, 0.08), 0.82, 1.2))
    old = min(1.0, max(0.0, (age_years - 40.0) / 40.0))
    chronic = set()
    if prng.random() < (0.05 + 0.1 * old) * rates:
        chronic.add("Cardiomegaly")
    if prng.random() < 0.03 * rates:
        chronic.add("Lung Lesion")
    if prng.random() < 0.03 * rates:
        chronic.add("Pleural Other")
    if prng.random() < (0.01 + 0.05 * old) * rates:
        chronic.add("Support Devices")
    return Patient(
        patient_index=patient_index,
        study_number=0,
        patient_id=f"PH{seed % 10000:04d}-{patient_index:07d}",
        sex=sex,
        birth_date=birth,
        split=split,
        body_size=body,
        chronic=frozenset(chronic),
    )


def _bernoulli(rng: np.random.Generator, p: float) -> bool:
    return bool(rng.random() < min(max(p, 0.0), 0.95))


def sample_truth(
    rng: np.random.Generator, patient: Patient, ap: bool, config: PhantomConfig
) -> tuple[dict[str, bool], bool]:
    """True presence of the 13 findings with realistic co-occurrence, and whether an isolated
    (nonspecific) lung opacity is present."""
    r = config.prevalence
    a = 1.0 if ap else 0.0
    t: dict[str, bool] = {}
    t["Cardiomegaly"] = "Cardiomegaly" in patient.chronic or _bernoulli(rng, 0.05 * r)
    cm = 1.0 if t["Cardiomegaly"] else 0.0
    t["Enlarged Cardiomediastinum"] = _bernoulli(rng, (0.05 + 0.25 * cm) * r)
    t["Edema"] = _bernoulli(rng, (0.04 + 0.3 * cm + 0.06 * a) * r)
    ed = 1.0 if t["Edema"] else 0.0
    t["Pleural Effusion"] = _bernoulli(rng, (0.08 + 0.35 * ed + 0.08 * cm + 0.06 * a) * r)
    ef = 1.0 if t["Pleural Effusion"] else 0.0
    t["Pneumonia"] = _bernoulli(rng, (0.07 + 0.04 * a) * r)
    pn = 1.0 if t["Pneumonia"] else 0.0
    t["Consolidation"] = _bernoulli(rng, (0.04 + 0.45 * pn) * r)
    t["Atelectasis"] = _bernoulli(rng, (0.07 + 0.35 * ef + 0.08 * a) * r)
    t["Lung Lesion"] = "Lung Lesion" in patient.chronic or _bernoulli(rng, 0.04 * r)
    t["Pneumothorax"] = _bernoulli(rng, (0.04 + 0.03 * a) * r)
    px = 1.0 if t["Pneumothorax"] else 0.0
    t["Fracture"] = _bernoulli(rng, (0.03 + 0.2 * px) * r)
    t["Pleural Other"] = "Pleural Other" in patient.chronic or _bernoulli(rng, 0.03 * r)
    isolated = _bernoulli(rng, 0.05 * r)
    t["Support Devices"] = "Support Devices" in patient.chronic or _bernoulli(
        rng, (0.08 + 0.45 * a + 0.4 * px) * r
    )
    t["Lung Opacity"] = isolated or any(t[name] for name in OPACITY_CAUSES)
    return {name: t[name] for name in FINDINGS}, isolated


def apply_overrides(
    truth: dict[str, bool], isolated: bool, overrides: dict[str, bool] | None
) -> tuple[dict[str, bool], bool]:
    """Force findings on or off, keeping "Lung Opacity" consistent with its causes."""
    if not overrides:
        return truth, isolated
    forced = {canonical_finding(name): bool(value) for name, value in overrides.items()}
    truth = dict(truth)
    truth.update(forced)
    causes_on = [name for name in OPACITY_CAUSES if truth[name]]
    if forced.get("Lung Opacity") is False:
        clash = [name for name in causes_on if forced.get(name)]
        if clash:
            raise ValueError(
                f"overrides contradict: 'Lung Opacity' forced off but {clash} forced on; "
                "every opacity-causing finding makes Lung Opacity true"
            )
        for name in causes_on:
            truth[name] = False
        isolated = False
    elif forced.get("Lung Opacity") is True:
        isolated = isolated or not causes_on
    else:
        isolated = isolated and truth["Lung Opacity"]
    truth["Lung Opacity"] = isolated or any(truth[name] for name in OPACITY_CAUSES)
    return truth, isolated


def _side(rng: np.random.Generator, bilateral: float = 0.0) -> str:
    u = rng.random()
    if u < bilateral:
        return "bilateral"
    return "right" if rng.random() < 0.55 else "left"


def _zone(rng: np.random.Generator, side: str, lower_bias: float = 0.5) -> str:
    if rng.random() < lower_bias:
        return "lower"
    zones = ["upper", "middle"] if side == "right" else ["upper", "lingula"]
    return zones[int(rng.integers(0, 2))]


def sample_attributes(
    seed: int, index: int, truth: dict[str, bool], isolated: bool, patient: Patient | None = None
) -> dict[str, dict]:
    """Side, severity and location of every present finding (own random stream per finding;
    a patient's chronic findings keep their attributes from study to study)."""
    attrs: dict[str, dict] = {}
    for k, name in enumerate(FINDINGS):
        if not truth[name] and not (name == "Lung Opacity" and isolated):
            continue
        if patient is not None and name in patient.chronic:
            rng = stream(seed, _STREAM_CHRONIC, patient.patient_index, k)
        else:
            rng = stream(seed, _STREAM_FINDING, index, k)
        sev = float(rng.uniform(0.3, 1.0))
        a: dict = {"severity": sev}
        if name == "Pleural Effusion":
            a["side"] = _side(rng, 0.45 if truth["Edema"] else 0.2)
            a["severity_other"] = float(rng.uniform(0.3, 1.0))
        elif name == "Pneumothorax":
            a["side"] = _side(rng)
        elif name in ("Consolidation", "Pneumonia", "Lung Opacity"):
            a["side"] = _side(rng, 0.15 if name == "Pneumonia" else 0.0)
            a["zone"] = _zone(rng, a["side"], 0.6)
            a["field"] = int(rng.integers(0, 1 << 30))
        elif name == "Atelectasis":
            a["side"] = _side(rng, 0.2)
            a["zone"] = "lower" if rng.random() < 0.8 else "middle"
            a["tilt"] = float(rng.uniform(-0.25, 0.25))
        elif name == "Lung Lesion":
            a["kind"] = "mass" if rng.random() < 0.35 else "nodule"
            a["count"] = 1 if a["kind"] == "mass" else int(rng.choice([1, 1, 2, 3]))
            a["side"] = _side(rng)
            a["zone"] = _zone(rng, a["side"], 0.3)
            a["spots"] = [
                (float(rng.uniform(0.3, 0.72)), float(rng.uniform(-0.4, 0.3)), float(rng.random()))
                for _ in range(a["count"])
            ]
        elif name == "Fracture":
            a["side"] = _side(rng)
            a["count"] = int(rng.choice([1, 1, 2, 3]))
            a["ribs"] = sorted(int(r) for r in rng.choice(np.arange(2, 6), a["count"], False))
            a["position"] = float(rng.uniform(0.6, 0.78))
        elif name == "Pleural Other":
            a["kind"] = ["thickening", "plaques", "apical cap"][int(rng.integers(0, 3))]
            a["side"] = _side(rng, 0.4 if a["kind"] == "plaques" else 0.15)
        elif name == "Support Devices":
            a["devices"] = _devices(rng, truth)
            for cause in ("Pneumothorax", "Pleural Effusion"):
                if cause in attrs and "chest tube" in a["devices"]:
                    a["chest_tube_side"] = 1 if attrs[cause]["side"] == "left" else -1
                    break
        attrs[name] = a
    if truth["Pneumonia"] and truth["Consolidation"]:
        # the consolidation is the pneumonia's: same place
        for key in ("side", "zone"):
            attrs["Consolidation"][key] = attrs["Pneumonia"][key]
    if truth["Lung Opacity"]:
        attrs["Lung Opacity"]["isolated"] = isolated
    return attrs


def _devices(rng: np.random.Generator, truth: dict[str, bool]) -> list[str]:
    devices = []
    if rng.random() < 0.4:
        devices.append("endotracheal tube")
    if rng.random() < (0.5 if devices else 0.2):
        devices.append("enteric tube")
    if rng.random() < 0.45:
        devices.append("central line")
    if rng.random() < 0.3:
        devices.append("pacemaker")
    if truth["Pneumothorax"] or (truth["Pleural Effusion"] and rng.random() < 0.3):
        if rng.random() < 0.7:
            devices.append("chest tube")
    if not devices:
        devices.append(["central line", "pacemaker", "endotracheal tube"][int(rng.integers(0, 3))])
    return devices


def sample_nuisance(
    rng: np.random.Generator, patient: Patient, ap: bool, scale: float
) -> dict[str, object]:
    """Nuisance factors: none of them carries a finding label."""
    s = scale
    marker = "R" if rng.random() < 0.6 else "L"
    # the draw that once chose the marker's corner at random is kept, so every later factor
    # (zoom, shift, texture) stays as it was; the corner now follows the letter: images are
    # displayed facing the patient, so the patient's right ("R") is on the image's left
    rng.random()
    return {
        "view": "AP" if ap else "PA",
        "body_size": float(np.clip(patient.body_size + rng.normal(0, 0.02) * s, 0.8, 1.22)),
        "rotation_deg": float(np.clip(rng.normal(0, 2.5), -6, 6) * s),
        "patient_rotation": float(np.clip(rng.normal(0, 0.025), -0.06, 0.06) * s),
        "inspiration": float(np.clip(rng.normal(-0.25 if ap else 0.1, 0.45), -1, 1) * s),
        "exposure": float(np.exp(rng.normal(0, 0.12) * s)),
        "contrast": float(np.exp(rng.normal(0, 0.12) * s)),
        "noise": float(rng.uniform(0.004, 0.02) * s),
        "marker": marker,
        "marker_corner": marker_corner(marker),
        "crop_zoom": float(1.0 + rng.uniform(-0.07, 0.1) * s),
        "crop_shift": (float(rng.normal(0, 0.03) * s), float(rng.normal(0, 0.035) * s)),
        "texture": int(rng.integers(0, 1 << 30)),
    }


def marker_corner(marker: str) -> str:
    """The image corner of a side marker: "R" (patient's right) on the image's left, "L" on its
    right, as a chest radiograph is displayed facing the patient."""
    return {"R": "left", "L": "right"}[marker]


@lru_cache(maxsize=4096)
def first_study_date(seed: int, patient_index: int) -> dt.date:
    rng = stream(seed, _STREAM_PATIENT, patient_index, 7)
    return _EPOCH + dt.timedelta(days=int(rng.integers(0, 12 * 365)))


def study_date(seed: int, patient: Patient) -> dt.date:
    """Date of a patient's n-th study: later studies follow earlier ones by weeks to months."""
    return _study_dates(seed, patient.patient_index)[patient.study_number]


@lru_cache(maxsize=4096)
def _study_dates(seed: int, patient_index: int) -> tuple[dt.date, ...]:
    rng = stream(seed, _STREAM_PATIENT, patient_index, 8)
    gaps = np.concatenate([[0], np.cumsum(rng.integers(2, 200, size=PATIENT_BLOCK - 1))])
    first = first_study_date(seed, patient_index)
    return tuple(first + dt.timedelta(days=int(g)) for g in gaps)


def age_on(birth: dt.date, day: dt.date) -> int:
    return day.year - birth.year - ((day.month, day.day) < (birth.month, birth.day))


def study_stream(seed: int, index: int) -> np.random.Generator:
    return stream(seed, _STREAM_STUDY, index)
