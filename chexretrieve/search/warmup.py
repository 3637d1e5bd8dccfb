"""Fit and cache what a search needs before the first user asks (issue 24, defect 10).

The first search under a geometry fits it on the finding's anchors (a posterior geometry also
embeds the broad prior corpus), computes the gallery's features under it and, in the case lookup,
measures the rank calibration; on the 3,000-image demo this made the first "Posterior Gaussian"
search take 43 s against 1.8 s later. ``warm_up`` does that work for every geometry of the
finding the UI opens with, then the default geometry of every other finding; ``start_warm_up``
runs it in a background thread at `serve` / `demo` start, so searches meanwhile still answer
(they wait only for what they need, computing it themselves if the thread has not reached it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

log = logging.getLogger("chexretrieve.search.warmup")


def warm_up(
    service,
    first_finding: str,
    geometries: Sequence[str],
    top_k: int,
    other_findings: Sequence[str] = (),
    default_geometry: str = "softmax",
    stop: threading.Event | None = None,
    extra: Callable[[], None] | None = None,
) -> dict[tuple[str, str], float]:
    """Seconds each (finding, geometry) took to fit, score and calibrate; a failing one is logged
    and skipped (a search by the user then reports it)."""
    from chexretrieve.search.service import SearchRequest

    gallery = service.gallery
    if len(gallery) == 0:
        return {}
    probe = int(gallery.image_ids[0])
    plan = [(first_finding, g) for g in geometries]
    plan += [(f, default_geometry) for f in other_findings if f != first_finding]
    took: dict[tuple[str, str], float] = {}
    if extra is not None:
        extra()
    for finding, geometry in plan:
        if stop is not None and stop.is_set():
            break
        started = time.perf_counter()
        try:
            request = SearchRequest(finding=finding, geometry=geometry, case_id=probe)
            service.gallery_scores(request)
            service.rank_calibration(request, top_k)
        except Exception:  # noqa: BLE001 - a warm-up never stops the server
            log.exception("warm-up of %s / %s failed", finding, geometry)
            continue
        took[(finding, geometry)] = time.perf_counter() - started
    return took


def start_warm_up(service, *args, **kwargs) -> tuple[threading.Thread, threading.Event]:
    """``warm_up`` in a daemon thread; (the thread, an event that stops it between steps)."""
    stop = threading.Event()
    thread = threading.Thread(
        target=warm_up, args=(service, *args), kwargs={**kwargs, "stop": stop},
        name="chexretrieve-warm-up", daemon=True,
    )  # fmt: skip
    thread.start()
    return thread, stop
