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
