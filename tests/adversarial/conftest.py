"""The adversarial suite's bookkeeping: cases tried / passed per category, and measured figures.

A test takes the ``cases`` fixture and calls ``cases.check(name, ok, detail)`` once per hostile
input it tries (before asserting, so failures are counted too) and ``cases.figure(name, value)``
for what it measured. At the end of the session a table is printed (``make adversarial``); with
``CHEXRETRIEVE_ADV_SUMMARY=FILE`` the same numbers are written as JSON. A test that records no
case counts as one case, passed when the test passed.
"""

from __future__ import annotations

import collections
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# our helpers, and the ingest, anchors, UI and density tests' ones (imported, never copied)
for helper_folder in (HERE, *(HERE.parent / n for n in ("ingest", "anchors", "ui", "density"))):
    if str(helper_folder) not in sys.path:
        sys.path.insert(0, str(helper_folder))

#: test module -> category shown in the summary (issue 9's numbering)
CATEGORIES = {
    "test_adv_bombs": "1 bombs, lying headers",
    "test_adv_corruption": "2 random corruptions",
    "test_adv_structure": "3 nesting, unknown/wrong VRs",
    "test_adv_markup": "4 markup in text fields",
    "test_adv_dicomdir": "5 DICOMDIR escapes",
    "test_adv_kill": "6 kill -9 and resume",
    "test_adv_storage_faults": "7 disk full, read-only DB",
    "test_adv_concurrency": "8 readers during ingest",
    "test_adv_web": "9 web surface",
    "test_adv_llm": "10 LLM endpoint faults",
    "test_adv_audit": "11 audit log, no PHI in logs",
    "test_adv_load": "12 load",
    # issue 23's findings
    "test_adv_audit_failclosed": "13 audit fails closed (full disk)",
    "test_adv_audit_keyed": "14 audit tampering, verify, export",
    "test_adv_store_generation": "15 ingest while a server answers",
    "test_adv_feature_cache": "16 damaged feature cache files",
    "test_adv_readonly_store": "17 read-only and other-schema stores",
    "test_adv_access": "18 accounts, roles, REST routes",
    "test_adv_inputs": "19 previews, picker, input caps",
    # issue 36's findings
    "test_adv_artefacts": "20 damaged or forged density, start-up race",
    "test_adv_audit_anchor": "21 audit trail anchored in the store",
    # issue 33's findings
    "test_adv_signin": "22 sign-in, sessions, shared state",
    # issue 33's findings
    "test_adv_phi": "23 PHI in the reports corpus",
}


@dataclass
class _Category:
    tests: collections.Counter = field(default_factory=collections.Counter)
    tried: int = 0
    passed: int = 0
    figures: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)


_RESULTS: dict[str, _Category] = collections.defaultdict(_Category)
_RECORDED: set[str] = set()  # node ids that recorded cases themselves


def category_of(nodeid: str) -> str:
    module = Path(nodeid.split("::")[0]).stem
    return CATEGORIES.get(module, module)


class CaseLog:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.category = _RESULTS[category_of(nodeid)]

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        _RECORDED.add(self.nodeid)
        self.category.tried += 1
        self.category.passed += bool(ok)
        if not ok:
            self.category.failures.append(f"{name}: {detail}"[:300])
        return bool(ok)

    def figure(self, name: str, value) -> None:  # noqa: ANN001
        self.category.figures[name] = value


@pytest.fixture
def cases(request) -> CaseLog:
    return CaseLog(request.node.nodeid)


def pytest_runtest_logreport(report) -> None:  # noqa: ANN001
    if "tests/adversarial/" not in report.nodeid.replace(
        "\\", "/"
    ) and not report.nodeid.startswith("test_adv_"):
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        category = _RESULTS[category_of(report.nodeid)]
        category.tests[report.outcome] += 1
        if report.nodeid not in _RECORDED:
            category.tried += 1
            category.passed += report.outcome == "passed"
            if report.outcome == "failed":
                category.failures.append(report.nodeid)


def _format_figure(value) -> str:  # noqa: ANN001
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)


def summary_rows() -> list[tuple[str, str, int, int, str]]:
    order = {name: i for i, name in enumerate(CATEGORIES.values())}
    rows = []
    for name in sorted(_RESULTS, key=lambda n: (order.get(n, 99), n)):
        cat = _RESULTS[name]
        total = sum(cat.tests.values())
        tests = f"{cat.tests['passed']}/{total}" + (
            f" ({cat.tests['skipped']} skipped)" if cat.tests["skipped"] else ""
        )
        figures = "; ".join(f"{k} {_format_figure(v)}" for k, v in cat.figures.items())
        rows.append((name, tests, cat.tried, cat.passed, figures))
    return rows


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    rows = summary_rows()
    if not rows:
        return
    write = terminalreporter.write_line
    terminalreporter.section("adversarial summary")
    header = ("category", "tests passed", "cases tried", "cases passed", "figures")
    widths = [max(len(header[i]), *(len(str(r[i])) for r in rows)) for i in range(4)]
    write("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)) + "  " + header[4])
    for row in rows:
        cells = [str(c).ljust(w) for c, w in zip(row[:4], widths, strict=True)]
        write("  ".join(cells) + "  " + row[4])
    tried = sum(r[2] for r in rows)
    passed = sum(r[3] for r in rows)
    write(f"total: {passed} of {tried} cases passed")
    for name in _RESULTS:
        for failure in _RESULTS[name].failures[:5]:
            write(f"FAILED CASE [{name}] {failure}")
    target = os.environ.get("CHEXRETRIEVE_ADV_SUMMARY")
    if target:
        data = {
            name: {
                "tests": dict(cat.tests),
                "cases_tried": cat.tried,
                "cases_passed": cat.passed,
                "figures": cat.figures,
                "failures": cat.failures,
            }
            for name, cat in _RESULTS.items()
        }
        Path(target).write_text(json.dumps(data, indent=2, default=str))


@pytest.fixture(scope="session")
def phantom_dicoms(tmp_path_factory) -> list[Path]:
    """Four 128 x 128 phantom radiographs, one per transfer syntax the project writes."""
    from chexretrieve.dicom.write import write_radiograph
    from chexretrieve.phantom.archive import dicom_choices, dicom_metadata, to_uint12
    from chexretrieve.phantom.config import PhantomConfig
    from chexretrieve.phantom.generator import generate_case

    folder = tmp_path_factory.mktemp("phantoms")
    config = PhantomConfig(size=128)
    paths = []
    for index, syntax in enumerate(("explicit", "deflate", "rle", "jpeg2000")):
        case = generate_case(11, index, config)
        choices = dicom_choices(11, index)
        paths.append(
            write_radiograph(
                folder / f"phantom_{syntax}.dcm",
                to_uint12(case.image),
                dicom_metadata(case, choices, config.size),
                transfer_syntax=syntax,
                photometric=choices["photometric"],
            )
        )
    return paths
