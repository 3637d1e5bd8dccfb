"""Where a results page's time goes in the browser: a JavaScript profile of `serve`'s case lookup.

On a store built by ``serve_scale.py`` (its ``--work`` folder, index built), this starts ``serve``,
opens cases in headless Chromium as ``serve_scale.py`` does (Pleural Effusion, then Edema), and
records a sampling profile of the page's JavaScript (Chrome DevTools Protocol ``Profiler``) over
the later searches. It prints each search's page clock (click to the frame that paints the new
results) and the functions with the most time of their own, per search. It does this twice: with
the shared placeholder on every card, then with a stored thumbnail for every image shown (removed
after), as ``serve_scale.py``'s ``thumbnails`` step stores them.

``--watch html`` times with the watcher ``serve_scale.py`` used before 2026-12-05, which compared
the results' whole HTML at every change; ``--watch serial`` (the default) with today's, which
compares the server's answer number. In the profile, the watcher's predicate is the function
named ``test``.

    nice -n 10 .venv/bin/python benchmarks/serve_scale.py --n 3000 --work .cache/scale/3k \\
        --skip search,two,workers,thumbnails
    nice -n 10 .venv/bin/python benchmarks/results_page_profile.py --work .cache/scale/3k
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serve_scale as ss  # noqa: E402

#: the watcher's predicate before 2026-12-05: the results' whole HTML against the last page's
HTML_RESULTS = (
    "(prev) => { const e = document.querySelector('#results');"
    " const r = e && e.querySelector('.cx-results[data-serial]');"
    " const busy = e && e.querySelector('[data-testid=status-tracker]:not(.hide)');"
    " return r && r.outerHTML !== prev && !busy && e.querySelector('.cx-card'); }"
)


def use_html_watcher() -> None:
    """Make ``serve_scale``'s timing compare the whole results HTML, as it did before."""
    ss.WATCH_RESULTS = ss.WATCH_RESULTS.replace(ss.RESULTS, HTML_RESULTS)
    ss._serial = ss._results


def profile_searches(port: int, pid: int, cases: list[int]) -> tuple[list[float], dict]:
    """Page clock of each search after the first two, and the profile taken over them."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                    args=["--no-sandbox", "--disable-gpu"])  # fmt: skip
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.set_default_timeout(600_000)
        page.add_init_script(ss.CLICK_CLOCK)
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector(ss.CASE_ID)
        ss.open_case(page, cases[0], pid)
        ss.choose_finding(page, "Edema", pid)
        cdp = page.context.new_cdp_session(page)
        cdp.send("Profiler.enable")
        cdp.send("Profiler.setSamplingInterval", {"interval": 200})  # microseconds
        cdp.send("Profiler.start")
        clock = [ss.open_case(page, case, pid)[0] for case in cases[1:]]
        profile = cdp.send("Profiler.stop")["profile"]
        browser.close()
    return clock, profile


def own_time_ms(profile: dict) -> Counter:
    """Milliseconds of each function's own time (samples x the gap to the next sample)."""
    nodes = {node["id"]: node for node in profile["nodes"]}
    gaps = profile["timeDeltas"][1:] + [0]
    found: Counter = Counter()
    for sample, gap in zip(profile["samples"], gaps, strict=True):
        frame = nodes[sample]["callFrame"]
        where = f"{frame['url'].rsplit('/', 1)[-1] or '-'}:{frame['lineNumber']}"
        found[(frame["functionName"] or "(anonymous)", where)] += gap / 1000
    return found


def report(what: str, clock: list[float], profile: dict, top: int) -> None:
    ordered = sorted(clock)
    ss.say(f"{what}: {len(clock)} searches, page clock median {ordered[len(ordered) // 2]:.3f} s, "
           f"max {ordered[-1]:.3f} s")  # fmt: skip
    for (name, where), ms in own_time_ms(profile).most_common(top):
        print(f"  {ms / len(clock):7.2f} ms per search  {name[:32]:32s} {where}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True,
                        help="a serve_scale.py --work folder (store and index built)")  # fmt: skip
    parser.add_argument("--searches", type=int, default=10, help="profiled searches")
    parser.add_argument("--watch", choices=("serial", "html"), default="serial",
                        help="how a new results page is told (see the module doc)")  # fmt: skip
    parser.add_argument("--top", type=int, default=15, help="functions printed per profile")
    args = parser.parse_args(argv)
    store_path = args.work / "archive.sqlite"
    if not store_path.exists() or not (args.work / "archive.index").exists():
        sys.exit(f"no store and index in {args.work}: build them with serve_scale.py first "
                 "(see this script's doc)")  # fmt: skip
    os.environ["CHEXRETRIEVE_TEST_ENCODERS"] = "1"
    os.environ.setdefault("CHEXRETRIEVE_AUDIT_LOG", str(args.work / "audit.jsonl"))
    if args.watch == "html":
        use_html_watcher()
    url = f"sqlite:///{store_path}"
    from chexretrieve.store import open_store

    with open_store(url) as store:
        n = store.count_images()
    # cases drawn as serve_scale.py draws them (its seed)
    cases = [int(c) for c in ss.np.random.default_rng(7).integers(1, n + 1, args.searches + 1)]
    shown = ss.shown_images(url, cases)
    for what in ("placeholders", "stored thumbnails"):
        if what == "stored thumbnails":
            ss.store_thumbnails(url, shown)
        port = ss.free_port()
        process, _, _ = ss.start_serve(url, port, args.work / "serve-profile.log")
        try:
            clock, profile = profile_searches(port, process.pid, cases)
        finally:
            process.terminate()
            process.wait()
            if what == "stored thumbnails":
                ss.remove_thumbnails(str(store_path), shown)
        report(f"{what} (watcher: {args.watch})", clock, profile, args.top)


if __name__ == "__main__":
    main()
