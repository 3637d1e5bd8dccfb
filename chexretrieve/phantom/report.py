"""Synthetic free-text reports for phantoms, and the CheXpert-style labels read from them.

Each sentence carries the labels it implies (1 positive, 0 negative, -1 uncertain); a finding's
label aggregates its mentions the way CheXpert does: positive beats uncertain beats negative, and a
finding that is never mentioned stays blank (nan).
"""

from __future__ import annotations

import math

import numpy as np

from chexretrieve.findings import FINDINGS

Mention = tuple[str, dict[str, float]]

_ZONE_WORDS = {
    ("right", "upper"): ["right upper lobe", "right upper lung", "right apex"],
    ("right", "middle"): ["right middle lobe", "right mid lung"],
    ("right", "lower"): ["right lower lobe", "right base", "right lung base"],
    ("left", "upper"): ["left upper lobe", "left upper lung", "left apex"],
    ("left", "lingula"): ["lingula", "left mid lung"],
    ("left", "lower"): ["left lower lobe", "left base", "retrocardiac left lower lobe"],
}


def _pick(rng: np.random.Generator, options: list[str]) -> str:
    return options[int(rng.integers(0, len(options)))]


def _size(sev: float, words=("small", "moderate", "large")) -> str:
    return words[0] if sev < 0.5 else words[1] if sev < 0.78 else words[2]


def _where(rng: np.random.Generator, a: dict) -> str:
    if a["side"] == "bilateral":
        return _pick(rng, ["bilateral lower lobe", "bibasilar", "bilateral"])
    zone = a.get("zone", "lower")
    if a["side"] == "right" and zone == "lingula":
        zone = "middle"
    if a["side"] == "left" and zone == "middle":
        zone = "lingula"
    return _pick(rng, _ZONE_WORDS[(a["side"], zone)])


def _place(rng: np.random.Generator, a: dict) -> str:
    """A location as a noun phrase ("in the {place}"): 'right lower lobe', 'lung bases'."""
    if a["side"] == "bilateral":
        return _pick(rng, ["lung bases", "lower lobes bilaterally", "both lower lobes"])
    return _where(rng, a)


def _side_word(side: str) -> str:
    return {"right": "right", "left": "left", "bilateral": "bilateral"}[side]


def positive_mentions(name: str, a: dict, rng: np.random.Generator, prior: bool) -> list[Mention]:
    """Sentences stating a present finding (label 1)."""
    sev = a["severity"]
    change = ""
    if prior:
        change = _pick(rng, ["", "", "Unchanged ", "Increased ", "New ", "Slightly decreased "])
    lo = {"Lung Opacity": 1.0}

    def cap(text: str) -> str:
        text = (change + text) if change else text
        return text[0].upper() + text[1:]

    if name == "Cardiomegaly":
        deg = _size(sev, ("mild", "moderate", "marked"))
        return [
            (
                cap(
                    _pick(
                        rng,
                        [
                            f"{deg} cardiomegaly.",
                            f"the heart is {deg}ly enlarged.",
                            f"{deg} enlargement of the cardiac silhouette.",
                        ],
                    )
                ),
                {name: 1.0},
            )
        ]
    if name == "Enlarged Cardiomediastinum":
        return [
            (
                cap(
                    _pick(
                        rng,
                        [
                            "widened mediastinum.",
                            "the mediastinum is widened.",
                            "enlarged cardiomediastinal silhouette.",
                            "prominent superior mediastinal contour.",
                        ],
                    )
                ),
                {name: 1.0},
            )
        ]
    if name == "Pleural Effusion":
        size, side = _size(sev), _side_word(a["side"])
        options = [
            f"{size} {side} pleural effusion.",
            f"{size} {side} pleural effusion with blunting of the costophrenic angle.",
        ]
        if a["side"] == "bilateral":
            options = [f"{size} bilateral pleural effusions.", "bilateral pleural effusions."]
        return [(cap(_pick(rng, options)), {name: 1.0})]
    if name == "Pneumothorax":
        size, side = _size(sev), _side_word(a["side"])
        return [
            (
                cap(
                    _pick(
                        rng,
                        [
                            f"{size} {side} pneumothorax.",
                            f"{size} {side} apical pneumothorax.",
                            f"there is a {size} {side} pneumothorax.",
                        ],
                    )
                ),
                {name: 1.0},
            )
        ]
    if name == "Consolidation":
        where = _where(rng, a)
        return [
            (
                cap(
                    _pick(
                        rng,
                        [
                            f"{where} consolidation.",
                            f"dense consolidation in the {_place(rng, a)}.",
                            f"{where} airspace consolidation with air bronchograms.",
                        ],
                    )
                ),
                {name: 1.0, **lo},
            )
        ]
    if name == "Pneumonia":
        where = _where(rng, a)
        return [
            (
                cap(
                    _pick(
                        rng,
                        [
                            f"{where} opacity consistent with pneumonia.",
                            f"findings compatible with {where} pneumonia.",
                            f"patchy {where} opacities representing pneumonia.",
                        ],
                    )
                ),
                {name: 1.0, **lo},
            )
        ]
    if name == "Lung Opacity":
        where = _where(rng, a)
        return [
            (
                cap(
                    _pick(
                        rng,
                        [
                            f"{where} opacity.",
                            f"hazy opacity in the {_place(rng, a)}.",
                            f"ill-defined {where} opacity.",
                        ],
                    )
                ),
                lo,
            )
        ]
    if name == "Edema":
        deg = _size(sev, ("mild", "moderate", "severe"))
        options = [
            f"{deg} pulmonary edema.",
            f"{deg} interstitial edema with septal lines.",
            f"{deg} perihilar edema.",
        ]
        return [(cap(_pick(rng, options)), {name: 1.0, **lo})]
    if name == "Atelectasis":
        where = _where(rng, a)
        return [
            (
                cap(
                    _pick(
                        rng,
                        [
                            f"plate-like atelectasis at the {_place(rng, a)}.",
                            f"{where} atelectasis.",
                            f"linear atelectasis in the {_place(rng, a)}.",
                        ],
                    )
                ),
                {name: 1.0, **lo},
            )
        ]
    if name == "Lung Lesion":
        side = _side_word(a["side"])
        if a["kind"] == "mass":
            size_cm = 3 + int(round(4 * sev))
            text = _pick(
                rng,
                [
                    f"{size_cm} cm {side} lung mass.",
                    f"{side} lung mass.",
                    f"lobulated mass in the {side} lung.",
                ],
            )
        else:
            plural = a["count"] > 1
            text = _pick(
                rng,
                [
                    f"{'multiple ' if plural else ''}{side} pulmonary "
                    f"nodule{'s' if plural else ''}.",
                    f"{'several' if plural else 'a'} {side} lung nodule{'s' if plural else ''}.",
                ],
            )
        return [(cap(text), {name: 1.0, **lo})]
    if name == "Fracture":
        side = _side_word(a["side"])
        ribs = [_ordinal(r + 1) for r in a["ribs"]]
        listed = ribs[0] if len(ribs) == 1 else ", ".join(ribs[:-1]) + " and " + ribs[-1]
        plural = "s" if len(ribs) > 1 else ""
        return [
            (
                cap(
                    _pick(
                        rng,
                        [
                            f"acute fracture{plural} of the {side} {listed} rib{plural}.",
                            f"displaced {side} {listed} rib fracture{plural}.",
                        ],
                    )
                ),
                {name: 1.0},
            )
        ]
    if name == "Pleural Other":
        side = _side_word(a["side"])
        text = {
            "thickening": f"{side} pleural thickening.",
            "plaques": f"calcified {side} pleural plaques.",
            "apical cap": f"{side} apical pleural thickening.",
        }[a["kind"]]
        return [(cap(text), {name: 1.0})]
    if name == "Support Devices":
        out = []
        for device in a["devices"]:
            out.append((_pick(rng, _DEVICE_SENTENCES[device]), {name: 1.0}))
        return out
    raise KeyError(name)


_DEVICE_SENTENCES = {
    "endotracheal tube": [
        "Endotracheal tube terminates about 4 cm above the carina.",
        "ET tube in standard position.",
        "Endotracheal tube in place.",
    ],
    "enteric tube": [
        "Enteric tube courses below the diaphragm.",
        "Nasogastric tube with tip in the stomach.",
    ],
    "central line": [
        "Central venous catheter with tip in the SVC.",
        "Right internal jugular line terminates in the superior vena cava.",
        "Central line in place.",
    ],
    "pacemaker": [
        "Left chest wall pacemaker with leads in the right heart.",
        "Dual-lead pacemaker in place.",
        "Cardiac pacing device unchanged.",
    ],
    "chest tube": ["Chest tube in place.", "Pleural drain in the lower hemithorax."],
}


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def hedged_mentions(name: str, a: dict, rng: np.random.Generator) -> list[Mention]:
    """Sentences that leave a (present or absent) finding uncertain (label -1)."""
    noun = _NOUNS[name]
    where = _where(rng, a) + " " if a and "side" in a and name not in _NO_WHERE else ""
    text = _pick(
        rng,
        [
            f"Possible {where}{noun}.",
            f"Cannot exclude {where}{noun}.",
            f"Findings may represent {where}{noun}.",
            f"Questionable {where}{noun}.",
            f"Suspected {where}{noun}.",
        ],
    )
    labels = {name: -1.0}
    return [(text, labels)]


_NO_WHERE = {"Cardiomegaly", "Enlarged Cardiomediastinum", "Edema", "Support Devices"}

_NOUNS = {
    "Enlarged Cardiomediastinum": "mediastinal widening",
    "Cardiomegaly": "cardiomegaly",
    "Lung Opacity": "opacity",
    "Lung Lesion": "nodule",
    "Edema": "mild pulmonary edema",
    "Consolidation": "consolidation",
    "Pneumonia": "pneumonia",
    "Atelectasis": "atelectasis",
    "Pneumothorax": "pneumothorax",
    "Pleural Effusion": "pleural effusion",
    "Pleural Other": "pleural thickening",
    "Fracture": "rib fracture",
    "Support Devices": "catheter",
}

_NEGATIONS = {
    "Enlarged Cardiomediastinum": [
        "The mediastinum is not widened.",
        "Normal mediastinal contours.",
    ],
    "Cardiomegaly": ["Heart size is normal.", "The heart is not enlarged.", "No cardiomegaly."],
    "Lung Opacity": ["The lungs are clear.", "No focal opacity.", "No airspace opacity."],
    "Lung Lesion": ["No pulmonary nodules or masses.", "No suspicious lung nodule."],
    "Edema": ["No pulmonary edema.", "No evidence of edema.", "No vascular congestion or edema."],
    "Consolidation": ["No focal consolidation.", "No consolidation."],
    "Pneumonia": ["No evidence of pneumonia.", "No pneumonia."],
    "Atelectasis": ["No atelectasis."],
    "Pneumothorax": ["No pneumothorax.", "There is no pneumothorax."],
    "Pleural Effusion": [
        "No pleural effusion.",
        "No pleural effusions.",
        "The costophrenic angles are sharp.",
    ],
    "Pleural Other": ["No pleural thickening."],
    "Fracture": [
        "No acute osseous abnormality.",
        "No displaced rib fracture.",
        "The bones are intact.",
    ],
    "Support Devices": ["No lines or tubes."],
}

#: findings a combined negative sentence can list, with the words it uses
_LISTABLE = {
    "Consolidation": "focal consolidation",
    "Pleural Effusion": "pleural effusion",
    "Pneumothorax": "pneumothorax",
    "Edema": "pulmonary edema",
    "Pneumonia": "pneumonia",
}


def negative_mentions(names: list[str], rng: np.random.Generator) -> list[Mention]:
    """Sentences negating absent findings; some are merged ("No X, Y, or Z.")."""
    out: list[Mention] = []
    listable = [n for n in names if n in _LISTABLE]
    if len(listable) >= 2 and rng.random() < 0.6:
        words = [_LISTABLE[n] for n in listable]
        text = "No " + ", ".join(words[:-1]) + (", or " if len(words) > 2 else " or ") + words[-1]
        out.append((text + ".", {n: 0.0 for n in listable}))
        names = [n for n in names if n not in listable]
    for name in names:
        out.append((_pick(rng, _NEGATIONS[name]), {name: 0.0}))
    return out


def aggregate_labels(mentions: list[Mention]) -> dict[str, float]:
    """CheXpert aggregation: 1 beats -1 beats 0; never mentioned stays nan."""
    labels = {name: math.nan for name in FINDINGS}
    for _, found in mentions:
        for name, value in found.items():
            old = labels[name]
            if math.isnan(old) or value == 1.0 or (value == -1.0 and old == 0.0):
                labels[name] = value
    return labels


def header_sentence(view: str, rng: np.random.Generator) -> str | None:
    if rng.random() < 0.5:
        return None
    if view == "AP":
        return _pick(
            rng,
            [
                "Portable AP view of the chest.",
                "Single portable frontal view.",
                "AP semi-upright radiograph of the chest.",
            ],
        )
    return _pick(
        rng, ["PA view of the chest.", "Frontal radiograph of the chest.", "Single PA view."]
    )


def normal_sentence(rng: np.random.Generator) -> str:
    return _pick(
        rng,
        [
            "No acute cardiopulmonary abnormality.",
            "No acute cardiopulmonary process.",
            "Normal chest radiograph.",
            "No radiographic evidence of acute disease.",
        ],
    )
