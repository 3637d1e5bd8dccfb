"""Vocabulary checks for anchor sentences: is a sentence about its finding, and is it negated?

Used to reject off-topic LLM answers and to label sentences when a prompt gives no polarity (the
paper's prompt returns bare strings). The word lists are report vocabulary written for this project.
"""

from __future__ import annotations

import re

from chexretrieve.findings import canonical_finding

#: words or stems of which at least one appears in a sentence about the finding
# fmt: off
FINDING_TERMS: dict[str, tuple[str, ...]] = {
    "Enlarged Cardiomediastinum": (
        "mediastin", "cardiomediastin", "aort", "hilar", "hila", "paratracheal", "superior vena",
        "thymus", "thyroid", "goiter", "lymphaden", "mass", "silhouette", "contour",
    ),
    "Cardiomegaly": (
        "cardiomegaly", "heart", "cardiac", "cardiothoracic", "ventric", "atri", "pericardial",
        "cardiomyopathy", "silhouette",
    ),
    "Lung Opacity": (
        "opacit", "opacification", "densit", "airspace", "air space", "infiltrat", "haz",
        "ground-glass", "ground glass", "consolidat", "parenchym", "shadow", "lung", "lucen",
    ),
    "Lung Lesion": (
        "nodul", "mass", "lesion", "neoplas", "tumor", "tumour", "malignan", "metasta", "granulom",
        "cavit", "carcinoma", "spiculat", "coin", "cancer",
    ),
    "Edema": (
        "edema", "oedema", "congesti", "vascul", "vessel", "kerley", "heart failure", "overload",
        "septal", "cephaliz", "interstitial", "peribronchial cuff", "fluid overload", "venous",
        "batwing", "bat-wing", "hydrostatic",
    ),
    "Consolidation": (
        "consolidat", "airspace", "air space", "air bronchogram", "opacit", "dense", "densit",
        "lobar", "segmental", "infiltrat",
    ),
    "Pneumonia": (
        "pneumonia", "infect", "infiltrat", "consolidat", "aspiration", "bronchopneumonia",
        "airspace", "opacit", "inflammat", "pneumonitis",
    ),
    "Atelectasis": (
        "atelecta", "collapse", "volume loss", "discoid", "plate-like", "platelike", "linear",
        "subsegmental", "hypoinflat", "elevat", "scar", "expan",
    ),
    "Pneumothorax": (
        "pneumothora", "pleural line", "pleural air", "apical", "lung edge", "visceral pleural",
        "tension", "air", "deep sulcus", "hydropneumothorax",
    ),
    "Pleural Effusion": (
        "effusion", "fluid", "costophrenic", "meniscus", "hydrothorax", "pleural", "blunting",
        "hemothorax", "chylothorax", "empyema", "fissur", "hemithorax", "loculat",
    ),
    "Pleural Other": (
        "pleural", "plaque", "thickening", "fibrothorax", "mesothelioma", "calcif", "apical cap",
        "pleura", "asbestos",
    ),
    "Fracture": (
        "fractur", "rib", "clavic", "vertebra", "osseous", "bone", "cortical", "callus",
        "compression", "sternum", "sternal", "scapul", "humer", "skelet", "deformity", "bony",
        "flail", "wire",
    ),
    "Support Devices": (
        "tube", "line", "catheter", "pacemaker", "pacer", "lead", "wire", "stent", "valve",
        "device", "port", "drain", "clip", "picc", "defibrillator", "icd", "balloon", "tip",
        "sternotomy", "monitor", "hardware", "electrode", "cannula", "impella", "pump", "recorder",
        "extubat", "intubat", "annuloplasty", "prosthe", "implant",
    ),
}
# fmt: on

_NEGATION = re.compile(
    r"^(no|without|negative for|absence of|absent|resolved|resolution of|not|never|nor|"
    r"there is no|there are no|there has been resolution|interval resolution|"
    r"normal|unremarkable|clear|free of|removal of|complete (?:resolution|clearing|re-expansion)|"
    r"interval (?:removal|clearing)|lungs? (?:are |is )?(?:clear|well|fully))\b",
    re.IGNORECASE,
)
_NEGATION_ANYWHERE = re.compile(
    r"\b(no (?:evidence|sign|signs|radiographic evidence) of|(?:is|are) not\b|does not|do not|"
    r"has resolved|have resolved|has cleared|have cleared|no longer|not (?:seen|identified|"
    r"appreciated|demonstrated|widened|enlarged)|within normal limits|(?:is|are) normal|"
    r"without (?:evidence|signs?) of|ruled out|(?:have|has) been removed|(?:were|was) removed|"
    r"\bremoved\b|extubated|explanted|(?:is|are) (?:sharp|clear|intact|unremarkable|preserved|"
    r"well (?:expanded|aerated|defined|inflated)|(?:now |still |again )?(?:aerated|re-?expanded))|"
    r"(?:likely|probably|grossly|remains?|appears?|stable(?: and)?|and) normal|"
    r"appears? (?:clear|unremarkable|intact|expanded)|returned to normal|normalized|"
    r"normal[- ](?:sized|in size|size|width|in width|configuration|appearance|position|caliber|"
    r"contour|contours|in appearance|in contour|in thickness)|free of|(?:with|;|,) no\b|"
    r"there (?:is|are|has been) no\b|no new\b|unlikely|(?:is|are) absent|\bresolved\b|"
    r"(?:remains?|now|grossly|stable) clear|clear lungs|(?:fully |well |re-?)expanded|"
    r"full expansion|(?:has|have) not\b)",
    re.IGNORECASE,
)
_HEDGE_POSITIVE = re.compile(
    r"\b(cannot be (?:excluded|ruled out)|can ?not (?:exclude|rule out)|(?:is|are) not excluded|"
    r"not (?:be )?ruled out|suspicious for|concerning for|worrisome for|(?:may|could) represent)\b",
    re.IGNORECASE,
)


def infer_polarity(sentence: str) -> str:
    """'negative' when the sentence denies or clears a finding, else 'positive' (rule-based).

    Hedged statements ("cannot be excluded", "concerning for") count as positive: they raise the
    finding. Measured against the 3,250 labelled authored finding sentences (test_anchors_topics).
    """
    text = sentence.strip()
    if _HEDGE_POSITIVE.search(text):
        return "positive"
    if _NEGATION.match(text) or _NEGATION_ANYWHERE.search(text):
        return "negative"
    return "positive"


def mentions_finding(sentence: str, finding: str) -> bool:
    """True when the sentence contains one of the finding's terms (case-insensitive substring)."""
    terms = FINDING_TERMS[canonical_finding(finding)]
    lowered = sentence.lower()
    return any(term in lowered for term in terms)


def on_topic_fraction(sentences: list[str], finding: str) -> float:
    if not sentences:
        return 0.0
    return sum(mentions_finding(s, finding) for s in sentences) / len(sentences)
