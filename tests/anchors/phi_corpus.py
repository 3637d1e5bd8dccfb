"""Synthetic chest X-ray reports with planted PHI of every HIPAA Safe Harbor kind (45 CFR
164.514(b)(2)(i) A-R that can occur in a report's text), for the de-identification tests and
``benchmarks/phi_scrub.py``.

The identifiers come from Faker (seeded, en_US), not from the scrubber's rule set, so the test
does not grade the rules with their own data. Every planted identifier sits in the FINDINGS or
IMPRESSION section beside clinical words (the sections the corpus keeps), in a sentence that
stays long enough to be kept. ``Planted.must_go`` are the words that must not survive: every
word of the identifier except generic ones (titles, street-type words, "MRN", URL schemes, ...).
Dates count every element (month names included): Safe Harbor allows the year alone, but a
year left beside a removed day is counted as a leak here, to stay strict.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from dataclasses import dataclass

from faker import Faker

#: clinical sentences without PHI (written for this corpus; also the false-removal sample)
CLINICAL = (
    "Small left pleural effusion with adjacent basilar atelectasis.",
    "No pneumothorax is identified.",
    "The cardiomediastinal silhouette is within normal limits.",
    "Moderate cardiomegaly with mild pulmonary vascular congestion.",
    "Right internal jugular central venous catheter terminates in the mid superior vena cava.",
    "Endotracheal tube tip lies 4 cm above the carina.",
    "Enteric tube courses below the diaphragm, tip not included on the image.",
    "Patchy opacity in the right lower lobe may represent aspiration or pneumonia.",
    "Hilar contours are normal and the lungs are well expanded.",
    "Median sternotomy wires and mediastinal clips are intact.",
    "Dual-lead pacemaker with leads in the right atrium and right ventricle.",
    "Healed fractures of the left sixth and seventh ribs.",
    "Retrocardiac opacity likely reflects atelectasis.",
    "Interstitial markings are diffusely increased, suggesting mild edema.",
    "Blunting of the right costophrenic angle suggests a small effusion.",
    "There is a 12 mm nodule projecting over the left upper lobe.",
    "Degenerative changes of the thoracic spine.",
    "Calcified granuloma in the right upper lobe.",
    "Elevation of the right hemidiaphragm is unchanged.",
    "Left PICC terminates at the cavoatrial junction.",
    "Subcutaneous emphysema along the right chest wall.",
    "No focal consolidation, effusion or pneumothorax.",
    "Bilateral hilar lymphadenopathy is again seen.",
    "Aortic knob calcification; the aorta is tortuous.",
)
#: words of an identifier that identify nobody (not counted when they survive)
GENERIC = frozenset(
    """dr mr mrs ms prof md rn do phd the of and at on to by with from for in a an is was
    street st avenue ave road rd drive lane ln court ct suite ste apt apartment unit way place
    pl boulevard blvd circle cir parkway pkwy trail square
    mrn mr medical record number no acc accession fax tel phone ext x http https www com org net
    edu info biz html php htm year years old aged age yo id account acct npi dea vin plate
    licence license serial sn model lot medicare member policy ssn device""".split()
)
#: the two-letter state codes (a state is not a Safe Harbor identifier)
STATES = frozenset(
    """al ak az ar ca co ct de fl ga hi id il in ia ks ky la me md ma mi mn ms mo mt ne nv nh
    nj nm ny nc nd oh ok or pa ri sc sd tn tx ut vt va wa wv wi wy dc pr""".split()
)
KINDS = (
    "name with title", "name without title", "initials", "street address", "city",
    "zip code", "date", "age over 89", "phone", "fax", "e-mail", "URL", "IP address",
    "social security number", "medical record number", "health plan number", "account number",
    "licence number", "vehicle id", "device id", "accession number", "identifier fragment",
)  # fmt: skip
ARCHIVE_KINDS = ("archive patient name", "archive patient id", "archive accession", "archive date")


@dataclass(frozen=True)
class Planted:
    kind: str
    value: str
    report: int  # index of the report it was planted in
    must_go: tuple[str, ...]
    sentence: str = ""  # the sentence that carries it


@dataclass(frozen=True)
class Corpus:
    reports: tuple[str, ...]
    planted: tuple[Planted, ...]
    clinical: tuple[str, ...]  # the PHI-free sentences used (false-removal sample)
    archive: dict  # names / ids / dates of the archive's own patients (for ArchiveIdentifiers)
    patients: tuple[dict, ...] = ()  # per archive patient: name (DICOM PN), id, accession, date


def context_words(corpus: Corpus) -> frozenset[str]:
    """Every word of the corpus that is not part of a planted identifier (clinical sentences and
    the words around each identifier), case-folded: a word also found there cannot count as a
    leak when the whole corpus is searched."""
    around = [p.sentence.replace(p.value, " ") for p in corpus.planted]
    return frozenset(w.casefold() for s in (*corpus.clinical, *around) for w in words(s))


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9]+", text)


def must_go(value: str, kind: str, context: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The identifying words of ``value``; ``context``: words of the report around it (a word
    that is also there, "4" of a date beside "4 cm", cannot be told apart and is not counted)."""
    out = []
    for word in words(value):
        low = word.casefold()
        if (kind == "street address" and low in STATES) or low in context:
            continue
        if kind != "date" and low in GENERIC:
            continue
        out.append(word)
    return tuple(out)


def _date_text(rng: random.Random, day: dt.date) -> str:
    n = day.day
    suffix = "th" if 11 <= n <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    forms = (
        f"{day.month:02d}/{n:02d}/{day.year}", f"{day.month}/{n}/{day.year % 100:02d}",
        day.isoformat(), f"{n:02d}.{day.month:02d}.{day.year}", day.strftime("%B %d, %Y"),
        day.strftime("%b %d %Y"), day.strftime("%d %B %Y"), day.strftime("%d-%b-%Y"),
        f"{day.strftime('%B')} {n}{suffix}", day.strftime("%Y%m%d"),
        f"the {n}{suffix} of {day.strftime('%B')}, {day.year}", f"{day.month}/{n}",
    )  # fmt: skip
    return rng.choice(forms)


def _phi(kind: str, fake: Faker, rng: random.Random) -> tuple[str, str]:
    """(identifier, a sentence that carries it beside clinical words)."""
    if kind == "name with title":
        value = f"{rng.choice(['Dr.', 'Dr', 'Mr.', 'Mrs.', 'Ms.'])} {fake.last_name()}"
        return value, f"Findings were discussed with {value} at the bedside."
    if kind == "name without title":
        first, last = fake.first_name(), rng.choice([fake.last_name(), "O'Brien", "McAllister"])
        value = rng.choice([f"{first} {last}", f"{last}, {first}", f"{first} {last}".upper()])
        return value, rng.choice([
            f"Patient {value} has a small left pleural effusion.",
            f"Comparison with the film of {value} shows no pneumothorax.",
            f"{value} was informed of the new right lower lobe opacity.",
        ])  # fmt: skip
    if kind == "initials":
        a = "".join(rng.choice("ABCDEFGHJKLMNPRSTW") for _ in range(rng.choice([2, 3])))
        b = "".join(rng.choice("abcdefghklmnprst") for _ in range(2))
        value = rng.choice([f"{a}/{b}", f"{a} / {b}"])
        return value, f"Mild cardiomegaly, dictated {value}."
    if kind == "street address":
        value = fake.street_address()
        return value, f"Prior chest film obtained at {value} showed mild edema."
    if kind == "city":
        value = fake.city()
        return value, f"Transferred from {value} with a right-sided chest tube."
    if kind == "zip code":
        value = fake.zipcode()
        return value, f"Outside hospital films (zip {value}) show a stable nodule."
    if kind == "date":
        value = _date_text(rng, fake.date_between(dt.date(2008, 1, 1), dt.date(2024, 12, 31)))
        return value, rng.choice([
            f"Compared with the radiograph of {value}, the effusion is smaller.",
            f"The nodule has grown since {value}.",
        ])  # fmt: skip
    if kind == "age over 89":
        age = rng.randint(90, 104)
        value = rng.choice([f"{age}-year-old", f"{age} year old", f"aged {age}", f"{age} yo"])
        return value, f"Kyphosis in this {value} woman; no acute fracture."
    if kind in ("phone", "fax"):
        value = fake.phone_number()
        word = "Called to" if kind == "phone" else "Report faxed to"
        return value, f"{word} {value} regarding the new pneumothorax."
    if kind == "e-mail":
        value = fake.email()
        return value, f"Images of the pleural effusion sent to {value} for review."
    if kind == "URL":
        value = rng.choice([fake.url(), f"https://{fake.domain_name()}/{fake.uri_path()}"])
        return value, f"Prior images of the nodule are at {value} for comparison."
    if kind == "IP address":
        value = rng.choice([fake.ipv4(), fake.ipv6()])
        return value, f"Lung windows reconstructed on workstation {value} show emphysema."
    if kind == "social security number":
        value = fake.ssn()
        return value, f"SSN {value}; mild bibasilar atelectasis."
    if kind == "medical record number":
        value = rng.choice([str(rng.randint(10**6, 10**8)), f"A{rng.randint(10**6, 10**7)}"])
        return value, f"MRN {value}: the endotracheal tube is 5 cm above the carina."
    if kind == "health plan number":
        value = fake.bothify("#??#-??#-??##").upper()
        return value, f"Medicare {value}; right lower lobe pneumonia."
    if kind == "account number":
        value = fake.bothify("##########")
        return value, f"Account {value}, portable chest with the patient supine."
    if kind == "licence number":
        value = rng.choice([fake.bothify("??#######").upper(), fake.bothify("##########")])
        return value, f"Ordered by provider licence {value}; evaluate the left lung base."
    if kind == "vehicle id":
        value = rng.choice([fake.vin(), fake.license_plate()])
        return value, f"Trauma film after a crash of vehicle {value}; no pneumothorax."
    if kind == "device id":
        value = fake.bothify("??#######?").upper()
        return value, f"Pacemaker serial {value} with leads in the right ventricle."
    if kind == "accession number":
        value = rng.choice([f"ACC{rng.randint(2010, 2024)}-{rng.randint(1, 99999):05d}",
                            str(rng.randint(10**7, 10**9))])  # fmt: skip
        return value, f"Accession {value}: stable right upper lobe granuloma."
    if kind == "identifier fragment":
        value = rng.choice([f"ACC{rng.randint(2010, 2024)}-___",
                            "___" + fake.bothify("?#?-??#-??##").upper()[1:]])  # fmt: skip
        return value, f"Compared with study {value}, the effusion is unchanged in size."
    raise ValueError(kind)


def _archive_phi(kind: str, patient: dict, rng: random.Random) -> tuple[str, str]:
    last, first = patient["name"].split("^")[:2]
    if kind == "archive patient name":
        value = rng.choice([
            f"{first.title()} {last.title()}", f"{last.upper()}, {first.upper()}",
            f"{last.lower()} {first.lower()}", f"{first.title()} {last.upper()}",
        ])  # fmt: skip
        return value, f"Portable film of {value} shows a left basilar opacity."
    if kind == "archive patient id":
        value = rng.choice([patient["id"], patient["id"].lower()])
        return value, f"Patient {value}: the heart size is normal."
    if kind == "archive accession":
        value = rng.choice([patient["accession"], patient["accession"].lower(),
                            patient["accession"].split("-")[0] + "-___"])  # fmt: skip
        return value, f"Comparison {value}: no interval change in the right effusion."
    value = _date_text(rng, patient["date"])
    return value, f"Compared with the study of {value}, the left effusion is larger."


def make_corpus(n_reports: int = 60, seed: int = 7, archive_patients: int = 12) -> Corpus:
    """``n_reports`` reports; every kind (and every archive kind) planted at least
    ``n_reports // len(kinds)`` times, in rotation, with clinical sentences around it."""
    rng = random.Random(seed)
    fake = Faker("en_US")
    fake.seed_instance(seed)
    patients = [
        {
            "name": f"{fake.last_name().upper()}^{fake.first_name().upper()}",
            "id": fake.bothify("PT-#######"),
            "accession": f"RAD{rng.randint(2015, 2024)}-{rng.randint(1, 99999):05d}",
            "date": fake.date_between(dt.date(2015, 1, 1), dt.date(2024, 12, 31)),
        }
        for _ in range(archive_patients)
    ]
    all_kinds = KINDS + ARCHIVE_KINDS
    reports, planted, used = [], [], []
    for r in range(n_reports):
        findings = rng.sample(CLINICAL, 3)
        impression = rng.sample(CLINICAL, 1)
        used += findings + impression
        context = {w.casefold() for s in findings + impression for w in words(s)}
        for k in range(2):
            kind = all_kinds[(2 * r + k) % len(all_kinds)]
            if kind in ARCHIVE_KINDS:
                value, sentence = _archive_phi(kind, rng.choice(patients), rng)
            else:
                value, sentence = _phi(kind, fake, rng)
            (findings if k == 0 else impression).insert(rng.randint(0, 1), sentence)
            around = context | {w.casefold() for w in words(sentence.replace(value, " "))}
            must = must_go(value, kind, frozenset(around))
            planted.append(Planted(kind, value, r, must, sentence))
        reports.append(
            "EXAMINATION: CHEST (PA AND LAT)\n\nFINDINGS:\n\n"
            + " ".join(findings)
            + "\n\nIMPRESSION:\n\n"
            + " ".join(impression)
            + "\n"
        )
    archive = {
        "names": frozenset(p["name"] for p in patients),
        "ids": frozenset(i for p in patients for i in (p["id"], p["accession"])),
        "dates": frozenset(p["date"] for p in patients),
    }
    return Corpus(
        tuple(reports), tuple(planted), tuple(dict.fromkeys(used)), archive, tuple(patients)
    )


def recall_by_kind(corpus: Corpus, scrubbed: list[str]) -> dict[str, tuple[int, int, list]]:
    """kind -> (removed, planted, [(value, surviving words), ...]) over ``scrubbed`` (one text
    per report, in corpus order)."""
    out: dict[str, tuple[int, int, list]] = {}
    for item in corpus.planted:
        removed, planted, leaks = out.get(item.kind, (0, 0, []))
        left = survivors(item, scrubbed[item.report])
        if left:
            leaks = [*leaks, (item.value, left)]
        out[item.kind] = (removed + (not left), planted + 1, leaks)
    return out


def survivors(planted: Planted, scrubbed: str) -> list[str]:
    """The words of ``planted.must_go`` still in the scrubbed text (case-insensitive words)."""
    present = {w.casefold() for w in words(scrubbed)}
    return [w for w in planted.must_go if w.casefold() in present]
