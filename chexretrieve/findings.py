"""The 13 CheXpert findings the project retrieves by, in CheXpert's column order."""

from __future__ import annotations

FINDINGS: tuple[str, ...] = (
    "Enlarged Cardiomediastinum",
    "Cardiomegaly",
    "Lung Opacity",
    "Lung Lesion",
    "Edema",
    "Consolidation",
    "Pneumonia",
    "Atelectasis",
    "Pneumothorax",
    "Pleural Effusion",
    "Pleural Other",
    "Fracture",
    "Support Devices",
)

_BY_KEY = {name.lower().replace(" ", "_"): name for name in FINDINGS}


def finding_slug(name: str) -> str:
    """'Pleural Effusion' -> 'pleural_effusion' (file names, URLs, CLI values)."""
    return canonical_finding(name).lower().replace(" ", "_")


def canonical_finding(name: str) -> str:
    """Accept 'Pleural Effusion', 'pleural effusion' or 'pleural_effusion'; return the name."""
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    if key not in _BY_KEY:
        raise ValueError(f"unknown finding {name!r}; expected one of: {', '.join(FINDINGS)}")
    return _BY_KEY[key]


#: what a missing label (the report does not mention the finding) is called everywhere: the CLI,
#: the case lookup's tables, chips and case picker
NOT_MENTIONED = "not mentioned"
#: a label value's word (1 positive, 0 negative, -1 uncertain; None / NaN not mentioned)
LABEL_WORDS = {1.0: "positive", 0.0: "negative", -1.0: "uncertain"}


def label_word(value: object) -> str:
    """The word for a label value: positive, negative, uncertain or ``NOT_MENTIONED``."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return NOT_MENTIONED
    return LABEL_WORDS.get(number, NOT_MENTIONED)
