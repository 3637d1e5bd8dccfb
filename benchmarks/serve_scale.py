"""A department-sized archive served through the real path: `serve`, a browser, a cold `search`.

Builds (once, kept in ``--work``) a synthetic store of ``--n`` images written through the store's
own batch writes (``Store.write_batch``, what ingest uses): 512-d unit embeddings in 64 clusters
under the test stand-in encoder's id, CheXpert labels whose rates depend on the cluster, two
images per study, views, sexes, ages, dates and splits. Then measures, each figure through the
product's own commands:

1. ``chexretrieve index build`` (a fresh process; default geometry of the 13 findings, their rank
   calibrations, the archive density): wall and CPU seconds, peak RSS, seconds per phase;
2. a cold ``chexretrieve search`` process (a new process; the page cache is warm): wall and CPU
   seconds, peak RSS, for the UI's default (Pleural Effusion / softmax) and another finding;
3. ``chexretrieve serve`` started -> the page answers (HTTP 200 with the app);
4. in headless Chromium on that page (Playwright, as the browser tests drive it): the first search
   (a case typed and opened: query, ranking, percentiles, calibration, thumbnails), the first
   search of another finding, then ``--searches`` more (p50 / p95). Each is timed by the page's
   own clock, from its click to the frame that paints the new results; the seconds of the whole
   Playwright call (its actionability checks before the click, 30-90 ms here, and its polling
   after the paint) are printed beside;
5. the server's memory from /proc/PID/smaps: RSS, the part that is pages of the index files
   (mapped, shared), the rest ("beyond the mapped index"), USS and PSS;
6. a second `serve` on the same index, the same searches: the two processes' memory against one
   (``pair_ratio``: the first's RSS plus the second's USS, over the first's RSS, at one moment);
7. ``serve --workers 2`` (the second worker forked after the imports), the same searches on each
   worker: the two workers' memory against the first's alone (``pair_ratio``);
8. a fresh `serve` with a stored thumbnail (256 px, a different phantom radiograph each) for every
   image the pages show, the same searches: what a real archive's pages cost (the synthetic images
   have no pixels, so steps 4-7 show the shared placeholder); the thumbnails are removed after;
9. 1,000 new images written, then ``chexretrieve index build`` again (the update ingest runs).

Every line prints the load average beside it (the development machine is shared); goals and
ratios from the issue's table are printed at the end, measured in this one run.

    .venv/bin/python benchmarks/serve_scale.py --n 300000 --work /tmp/scale-300k
    .venv/bin/python benchmarks/serve_scale.py --n 1000000 --work /tmp/scale-1m --searches 20
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for folder in (REPO, REPO / "tests"):  # the package; the tests' free-port helper
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from net_ports import free_port, free_ports  # noqa: E402
from synthetic_archive import (  # noqa: E402
    DIM,
    ENCODER,
    ENCODER_ID,
    build_store,
    remove_thumbnails,
    store_thumbnails,
)

GOALS = {  # figure -> (300k goal, 1M goal), seconds or GB
    "index build": (180.0, 600.0),
    "serve start": (5.0, 10.0),
    "first search": (1.0, 1.5),
    "p95 after": (None, 0.25),
    "p95 after (service)": (None, 0.25),
    "p95 after, thumbnails": (None, 0.25),  # every image shown with a stored thumbnail
    "RSS beyond the index": (1.0, 2.0),
    "incremental update": (10.0, 20.0),
    "2 processes / 1": (None, None),  # two separate `serve` processes: reported, no goal
    "2 workers / 1": (1.2, None),  # `serve --workers 2`: the "2 processes vs 1"
}


def load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def say(text: str) -> None:
    print(f"{text}  [{load()}]", flush=True)


def env() -> dict:
    return {**os.environ, "CHEXRETRIEVE_TEST_ENCODERS": "1", "PYTHONPATH": str(REPO)}


def check_bulk(work: Path, n: int = 300) -> None:
    """The bulk rows equal ``write_batch``'s: the same gallery, labels and metadata."""
    from chexretrieve.search.sources import gallery_from_store
    from chexretrieve.store import open_store

    galleries = []
    for bulk in (False, True):
        url = f"sqlite:///{work / f'check-{int(bulk)}.sqlite'}"
        build_store(url, 0, n, batch=100, bulk=bulk)
        with open_store(url) as store:
            assert not store.integrity_check(), store.integrity_check()
            galleries.append(gallery_from_store(store, ENCODER_ID))
    a, b = galleries
    assert np.array_equal(a.image_ids, b.image_ids)
    assert np.array_equal(a.embeddings, b.embeddings)
    assert a.metadata.equals(b.metadata), "metadata differ"
    assert a.labels.equals(b.labels), "labels differ"
    say(f"bulk rows equal write_batch's on {n} images")


# ------------------------------------------------------------------------- processes
def run(command: list[str]) -> dict:
    """Wall and CPU seconds and peak RSS (GB) of one process (its own rusage), with its output."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=REPO, env=env(), stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)  # reaped here: its rusage alone
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        text_out, text_err = out.read(), err.read()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{text_err[-3000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
            "max_rss_gb": usage.ru_maxrss / 2**20, "out": text_out, "err": text_err}  # fmt: skip


def numbers(done: dict) -> dict:
    return {k: v for k, v in done.items() if k not in ("out", "err")}


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "chexretrieve", *args]


def start_serve(url: str, port: int, log: Path, workers: int = 1
                ) -> tuple[subprocess.Popen, float, float]:  # fmt: skip
    """A `serve` process (``workers`` of them, on consecutive ports), the seconds until every
    worker's page answers and the CPU seconds the first used."""
    started = time.perf_counter()
    handle = open(log, "w")  # noqa: SIM115 - closed with the process
    command = cli("serve", "--db", url, "--encoder", ENCODER, "--port", str(port))
    if workers > 1:
        command += ["--workers", str(workers)]
    process = subprocess.Popen(
        command, cwd=REPO, env=env(), stdout=handle, stderr=subprocess.STDOUT
    )  # fmt: skip
    waiting = [f"http://127.0.0.1:{port + i}/" for i in range(workers)]
    while waiting:
        if process.poll() is not None:
            raise RuntimeError(f"serve exited: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(waiting[0], timeout=5) as answer:
                body = answer.read().decode("utf-8", "replace")
                if answer.status == 200 and "case lookup" in body:
                    waiting.pop(0)
                    continue
        except OSError:
            pass
        time.sleep(0.1)
    return process, time.perf_counter() - started, cpu_seconds(process.pid)


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (/proc/PID/task/*/children)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory(pid: int, index: Path) -> dict:
    """GB of the process: RSS, the pages of index files in it, the rest, USS and PSS."""
    rss = index_rss = 0
    current = None
    with open(f"/proc/{pid}/smaps") as handle:
        for line in handle:
            head = line.split()
            if not head:
                continue
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                current = head[5] if len(head) > 5 else ""
            elif head[0] == "Rss:":
                kb = int(head[1])
                rss += kb
                if current and current.startswith(str(index)):
                    index_rss += kb
    rollup = {}
    with open(f"/proc/{pid}/smaps_rollup") as handle:
        for line in handle:
            parts = line.split()
            if len(parts) >= 3 and parts[0].endswith(":"):
                rollup[parts[0][:-1]] = int(parts[1])
    uss = rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0)
    gb = 2**20
    return {"rss": rss / gb, "index": index_rss / gb, "beyond": (rss - index_rss) / gb,
            "uss": uss / gb, "pss": rollup.get("Pss", 0) / gb}  # fmt: skip


API_SCRIPT = """
import json, sys, time
from chexretrieve.app import AppConfig, open_search_app
from chexretrieve.search.service import SearchRequest
url, cases = sys.argv[1], [int(c) for c in sys.argv[2].split(",")]
started = time.perf_counter()
service = open_search_app(AppConfig(db_url=url, encoder=sys.argv[3])).service
opened = time.perf_counter() - started
times = []
for finding, case in [("Pleural Effusion", cases[0]), ("Edema", cases[0])] + [
        ("Pleural Effusion", c) for c in cases[1:]]:
    started = time.perf_counter()
    service.search(SearchRequest(finding=finding, geometry="softmax", case_id=case, top_k=12))
    times.append(time.perf_counter() - started)
print(json.dumps({"open": opened, "times": times}))
"""


def api_searches(url: str, cases: list[int]) -> dict:
    """The search service itself (what `search` and the UI call), in one process: opening the
    index, the first search of two findings, then one per case (p50 / p95)."""
    done = run([sys.executable, "-c", API_SCRIPT, url, ",".join(map(str, cases)), ENCODER])
    found = json.loads(done["out"].strip().splitlines()[-1])
    later = found["times"][2:]
    return {"open": found["open"], "first": found["times"][0], "other": found["times"][1],
            "p50": float(np.percentile(later, 50)), "p95": float(np.percentile(later, 95)),
            "cpu": done["cpu"]}  # fmt: skip


SHOWN_SCRIPT = """
import json, sys
from chexretrieve.app import AppConfig, open_search_app
from chexretrieve.search.service import SearchRequest
url, cases = sys.argv[1], [int(c) for c in sys.argv[2].split(",")]
service = open_search_app(AppConfig(db_url=url, encoder=sys.argv[3])).service
shown = set(cases)
for finding, case in [("Pleural Effusion", cases[0])] + [("Edema", c) for c in cases]:
    found = service.search(SearchRequest(finding=finding, geometry="softmax", case_id=case,
                                         top_k=12))
    shown.update(hit.image_id for hit in found.hits)
print(json.dumps(sorted(shown)))
"""


def shown_images(url: str, cases: list[int]) -> list[int]:
    """The images ``browse`` shows: the cases opened and their results (the UI's defaults;
    Pleural Effusion for the first case, then Edema, which ``browse`` chooses and keeps)."""
    done = run([sys.executable, "-c", SHOWN_SCRIPT, url, ",".join(map(str, cases)), ENCODER])
    return json.loads(done["out"].strip().splitlines()[-1])


# ---------------------------------------------------------------------------- browser
CASE_ID = "#case-id textarea, #case-id input"
#: new results are in the page: the server numbers each answer (``data-serial``), so comparing
#: numbers costs nothing, where comparing the HTML serialised a 600 kB page (stored thumbnails
#: inline) at every change the observer saw: about 65 ms of the page's own thread per search
RESULTS = (
    "(prev) => { const e = document.querySelector('#results');"
    " const r = e && e.querySelector('.cx-results[data-serial]');"
    " const busy = e && e.querySelector('[data-testid=status-tracker]:not(.hide)');"
    " return r && r.dataset.serial !== prev && !busy && e.querySelector('.cx-card'); }"
)


#: installed in the page before its scripts: the moment of the last click, as the page saw it
CLICK_CLOCK = (
    "window.__cx = {click: null, shown: null};"
    " document.addEventListener('click', () => { window.__cx.click = performance.now(); }, true);"
)
#: watches #results until RESULTS holds for new results, then notes the moment after the frame
#: that paints them (a frame, then a task: the browser has painted by then)
WATCH_RESULTS = (
    "(prev) => { const test = " + RESULTS + "; window.__cx.shown = null;"
    " const box = document.querySelector('#results');"
    " const seen = new MutationObserver(() => { if (window.__cx.shown === null && test(prev)) {"
    " seen.disconnect(); window.__cx.shown = -1; requestAnimationFrame(() => setTimeout(() => {"
    " window.__cx.shown = performance.now(); }, 0)); } });"
    " seen.observe(box, {childList: true, subtree: true, attributes: true, characterData: true});"
    " }"
)


def _results(page) -> str:
    script = "e => { const r = e.querySelector('.cx-results'); return r ? r.outerHTML : ''; }"
    return page.eval_on_selector("#results", script)


def _serial(page) -> str:
    """The number of the results on screen ('' before the first)."""
    script = (
        "e => { const r = e.querySelector('.cx-results[data-serial]');"
        " return r ? r.dataset.serial : ''; }"
    )
    return page.eval_on_selector("#results", script)


def _timed(page, pid: int, act) -> tuple[float, float, float]:
    """(seconds from the page's click to the new results painted, as the page's own clock
    measures it; server CPU seconds; seconds of the whole Playwright call, which adds its
    actionability checks before the click and its polling after the paint)."""
    page.evaluate(WATCH_RESULTS, _serial(page))
    started, cpu = time.perf_counter(), cpu_seconds(pid)
    act()
    page.wait_for_function("() => window.__cx.shown > 0")
    wall, used = time.perf_counter() - started, cpu_seconds(pid) - cpu
    shown = page.evaluate("() => (window.__cx.shown - window.__cx.click) / 1000")
    return shown, used, wall


def open_case(page, case: int, pid: int) -> tuple[float, float, float]:
    """Opening a case to its results on screen (query, search, render): see ``_timed``."""
    page.fill(CASE_ID, str(case))
    return _timed(page, pid, lambda: page.click("#load-case"))


def choose_finding(page, finding: str, pid: int) -> tuple[float, float, float]:
    """Choosing another finding to its results on screen: see ``_timed``."""
    page.click("#finding input")
    option = f"#finding li[role='option'][aria-label='{finding}']"
    return _timed(page, pid, lambda: page.click(option))


def browse(port: int, pid: int, cases: list[int], finding: str, searches: int) -> dict:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                    args=["--no-sandbox", "--disable-gpu"])  # fmt: skip
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.set_default_timeout(600_000)
        page.add_init_script(CLICK_CLOCK)
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector(CASE_ID)
        first, first_cpu, first_wall = open_case(page, cases[0], pid)
        say(f"  first search (Pleural Effusion / softmax): {first:.2f} s ({first_cpu:.2f} s "
            f"of the server's CPU; {first_wall:.2f} s through Playwright)")  # fmt: skip
        other, other_cpu, other_wall = choose_finding(page, finding, pid)
        say(f"  first search of {finding} (softmax): {other:.2f} s ({other_cpu:.2f} s CPU; "
            f"{other_wall:.2f} s through Playwright)")  # fmt: skip
        later = [open_case(page, case, pid) for case in cases[1 : 1 + searches]]
        page_kb = len(_results(page)) / 1024  # the last results page's HTML (thumbnails inline)
        thumbnails = page.eval_on_selector_all(
            "#results .cx-card img", "imgs => imgs.map(i => i.src.length > 8000 ? 1 : 0)"
        )  # the shared placeholder (a grey square with a cross) is a PNG of under 2 kB
        browser.close()
    return {"page_kb": page_kb, "thumbnails_shown": sum(thumbnails), "cards": len(thumbnails),
            "first": first, "first_cpu": first_cpu, "first_wall": first_wall, "other": other,
            "other_cpu": other_cpu, "other_wall": other_wall, "later": [t for t, _, _ in later],
            "later_cpu": [c for _, c, _ in later],
            "later_wall": [w for _, _, w in later]}  # fmt: skip


def pair_ratio(a: dict, b: dict, alone: dict, what: str) -> float:
    """Two serving processes' memory against one, both measured at the same moment: the first's
    RSS plus what only the second holds (its USS), over the first's RSS. (Against the RSS of the
    one `serve` measured earlier the ratio also counts the index pages read in the meantime, by
    the background check or by more searches: file pages, shared, not the second process's.)"""
    ratio = (a["rss"] + b["uss"]) / a["rss"]
    earlier = (a["rss"] + b["uss"]) / alone["rss"]
    say(f"  {what}: USS {a['uss']:.2f} + {b['uss']:.2f} GB, PSS {a['pss']:.2f} + {b['pss']:.2f} "
        f"GB, RSS {a['rss']:.2f} + {b['rss']:.2f} GB (of which index pages {a['index']:.2f} + "
        f"{b['index']:.2f}); the two together {a['rss'] + b['uss']:.2f} GB against the first "
        f"alone {a['rss']:.2f} GB = {ratio:.2f}x (against the one `serve` measured before, "
        f"{alone['rss']:.2f} GB: {earlier:.2f}x)")  # fmt: skip
    return ratio


# --------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300_000, help="images in the synthetic store")
    parser.add_argument("--work", type=Path, required=True, help="folder of the store (kept)")
    parser.add_argument("--searches", type=int, default=20, help="searches after the first")
    parser.add_argument("--skip", default="", help="comma-separated steps to skip: "
                        "build,search,serve,two,workers,thumbnails,update")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--check-bulk", action="store_true", help="first check the bulk rows equal write_batch's"
    )
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    os.environ["CHEXRETRIEVE_TEST_ENCODERS"] = "1"
    args.work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("CHEXRETRIEVE_AUDIT_LOG", str(args.work / "audit.jsonl"))
    store_path = args.work / "archive.sqlite"
    url = f"sqlite:///{store_path}"
    index = args.work / "archive.index"
    big = 1 if args.n >= 650_000 else 0
    figures: dict = {"n": args.n, "load_before": os.getloadavg()}
    if args.check_bulk:
        check_bulk(args.work)
    if not store_path.exists():
        say(f"building a synthetic store of {args.n:,} images ({DIM}-d) in {store_path}")
        figures["store_s"] = build_store(url, 0, args.n, bulk=True)
        say(f"store written in {figures['store_s']:.0f} s")

    if "build" not in skip:
        say("index build (a fresh process) ...")
        done = run(cli("index", "build", "--db", url, "--encoder", ENCODER, "--no-progress"))
        figures["build"] = numbers(done)
        say(f"  index build: {done['wall']:.0f} s wall, {done['cpu']:.0f} s CPU, peak RSS "
            f"{done['max_rss_gb']:.2f} GB; {done['err'].strip().splitlines()[-1]}")  # fmt: skip

    rng = np.random.default_rng(7)
    cases = [int(c) for c in rng.integers(1, args.n + 1, size=args.searches + 1)]
    if "search" not in skip:
        figures["cold_search"] = []
        for finding in ("Pleural Effusion", "Edema"):
            done = run(cli("search", "--db", url, "--encoder", ENCODER, "--case", str(cases[0]),
                           "--finding", finding, "--json"))  # fmt: skip
            figures["cold_search"].append(numbers(done))
            say(f"  cold `search` {finding}: {done['wall']:.2f} s wall, {done['cpu']:.2f} s CPU, "
                f"peak RSS {done['max_rss_gb']:.2f} GB")  # fmt: skip
        done = run([sys.executable, "-c", "import chexretrieve.cli"])
        figures["import_s"] = done["wall"]
        say(f"  (importing the command line alone: {done['wall']:.2f} s wall)")
        api = figures["api"] = api_searches(url, cases)
        say(f"  search service in one process: open {api['open']:.2f} s, first search "
            f"{api['first']:.3f} s, first of Edema {api['other']:.3f} s, then p50 "
            f"{api['p50']:.3f} s, p95 {api['p95']:.3f} s")  # fmt: skip

    servers = []
    try:
        if "serve" not in skip:
            port = free_port()
            process, started, cpu = start_serve(url, port, args.work / "serve-1.log")
            servers.append(process)
            figures["serve_start_s"], figures["serve_start_cpu"] = started, cpu
            say(f"  serve start -> page answers: {started:.2f} s ({cpu:.2f} s CPU)")
            figures["browser"] = browse(port, process.pid, cases, "Edema", args.searches)
            later, cpus = figures["browser"]["later"], figures["browser"]["later_cpu"]
            p50, p95 = np.percentile(later, [50, 95])
            c50, c95 = np.percentile(cpus, [50, 95])
            w50, w95 = np.percentile(figures["browser"]["later_wall"], [50, 95])
            say(f"  {len(later)} later searches, click to results painted: p50 {p50:.3f} s, p95 "
                f"{p95:.3f} s (server CPU per search: p50 {c50:.3f} s, p95 {c95:.3f} s; through "
                f"Playwright's calls: p50 {w50:.3f} s, p95 {w95:.3f} s)")  # fmt: skip
            figures["memory_1"] = memory(process.pid, index)
            m = figures["memory_1"]
            say(f"  server memory: RSS {m['rss']:.2f} GB, of which mapped index pages "
                f"{m['index']:.2f} GB, beyond the index {m['beyond']:.2f} GB; USS {m['uss']:.2f} "
                f"GB, PSS {m['pss']:.2f} GB")  # fmt: skip
        if "two" not in skip and servers:
            port2 = free_port()
            second, started2, _ = start_serve(url, port2, args.work / "serve-2.log")
            servers.append(second)
            browse(port2, second.pid, cases, "Edema", args.searches)
            a, b = memory(servers[0].pid, index), memory(second.pid, index)
            figures["memory_2"] = [a, b]
            figures["two_over_one"] = pair_ratio(a, b, figures["memory_1"], "two servers")
            say(f"  (the second started in {started2:.1f} s)")
    finally:
        for process in servers:
            process.terminate()
            process.wait(timeout=60)

    if "workers" not in skip and "memory_1" in figures:
        port = free_ports(2)
        process, started, _ = start_serve(url, port, args.work / "serve-workers.log", workers=2)
        try:
            (child,) = children(process.pid)
            say(f"  serve --workers 2: both pages answer after {started:.2f} s")
            runs = [browse(port + i, pid, cases, "Edema", args.searches)
                    for i, pid in enumerate((process.pid, child))]  # fmt: skip
            a, b = memory(process.pid, index), memory(child, index)
            ratio = pair_ratio(a, b, figures["memory_1"], "two workers")
            p50, p95 = np.percentile([t for run in runs for t in run["later"]], [50, 95])
            figures["workers"] = {"start_s": started, "memory": [a, b], "later_p50": p50,
                                  "later_p95": p95, "over_one": ratio}  # fmt: skip
            say(f"  later searches on the two workers: p50 {p50:.3f} s, p95 {p95:.3f} s")
        finally:
            process.terminate()
            process.wait(timeout=60)

    if "thumbnails" not in skip and "browser" in figures:
        figures["thumbnails"] = with_thumbnails(url, store_path, cases, args, figures["browser"])

    if "update" not in skip:
        from chexretrieve.store import open_store

        with open_store(url) as store:  # new images each run: the earlier runs' are stored
            held = store.count_images()
        written = build_store(url, held, 1000, batch=1000)
        with open_store(url) as store:
            added = store.count_images() - held
        if added != 1000:
            raise RuntimeError(f"the update wrote {added} new images, not 1,000")
        say(f"  1,000 new images written in {written:.1f} s (the store now holds {held + added:,})")
        done = run(cli("index", "build", "--db", url, "--encoder", ENCODER, "--no-progress"))
        figures["update"] = numbers(done)
        say(f"  incremental `index build`: {done['wall']:.1f} s wall, {done['cpu']:.1f} s CPU; "
            f"{done['err'].strip().splitlines()[-1]}")  # fmt: skip

    figures["load_after"] = os.getloadavg()
    report(figures, big)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2, default=float))
    return figures


def with_thumbnails(url: str, store_path: Path, cases: list[int], args, plain: dict) -> dict:  # noqa: ANN001
    """The same searches in a fresh `serve` with a stored thumbnail (a phantom radiograph's,
    256 px) for every image the pages show, as a real archive sends them; the thumbnails are
    removed again afterwards."""
    shown = shown_images(url, cases)
    written = store_thumbnails(url, shown)
    say(f"  stored thumbnails for the {len(shown)} images the pages show "
        f"({written / len(shown) / 1024:.0f} kB each)")  # fmt: skip
    try:
        port = free_port()
        process, started, _ = start_serve(url, port, args.work / "serve-thumbnails.log")
        try:
            found = browse(port, process.pid, cases, "Edema", args.searches)
        finally:
            process.terminate()
            process.wait(timeout=60)
    finally:
        remove_thumbnails(str(store_path), shown)
    p50, p95 = np.percentile(found["later"], [50, 95])
    w50, w95 = np.percentile(found["later_wall"], [50, 95])
    c50, c50_plain = np.percentile(found["later_cpu"], 50), np.percentile(plain["later_cpu"], 50)
    before = float(np.percentile(plain["later"], 95))
    say(f"  the last page: {found['page_kb']:.0f} kB of results HTML, {found['thumbnails_shown']} "
        f"of {found['cards']} cards show a stored thumbnail (without them: "
        f"{plain['page_kb']:.0f} kB, {plain['thumbnails_shown']})")  # fmt: skip
    say(f"  with thumbnails: first search {found['first']:.2f} s, {len(found['later'])} later "
        f"searches p50 {p50:.3f} s, p95 {p95:.3f} s ({p95 / before:.2f}x the p95 without, "
        f"{before:.3f} s; through Playwright's calls p50 {w50:.3f}, p95 {w95:.3f} s; server CPU "
        f"per search p50 {c50:.3f} s, {c50_plain:.3f} s without)")  # fmt: skip
    return {**found, "images": len(shown), "bytes": written, "later_p50": float(p50),
            "later_p95": float(p95), "over_plain_p95": float(p95 / before)}  # fmt: skip


def report(figures: dict, big: int) -> None:
    browser = figures.get("browser", {})
    later = browser.get("later")  # absent when `serve` was skipped: nothing to report
    measured = {
        "index build": figures.get("build", {}).get("wall"),
        "serve start": figures.get("serve_start_s"),
        "first search": max(browser.get("first", 0), browser.get("other", 0)) or None,
        "p95 after": float(np.percentile(later, 95)) if later else None,
        "p95 after (service)": figures.get("api", {}).get("p95"),
        "p95 after, thumbnails": figures.get("thumbnails", {}).get("later_p95"),
        "RSS beyond the index": figures.get("memory_1", {}).get("beyond"),
        "incremental update": figures.get("update", {}).get("wall"),
        "2 processes / 1": figures.get("two_over_one"),
        "2 workers / 1": figures.get("workers", {}).get("over_one"),
    }
    print(f"\nfigures for {figures['n']:,} images (goal for {'1M' if big else '300k'}):")
    for name, value in measured.items():
        goal = GOALS[name][big]
        if value is None:
            continue
        ratio = f"{value / goal:.2f} x the goal {goal:g}" if goal else "no goal"
        met = "" if not goal else (" met" if value <= goal else " NOT met")
        print(f"  {name:22s} {value:8.2f}   {ratio}{met}")
    print(f"load average before {figures['load_before']}, after {figures['load_after']}")


if __name__ == "__main__":
    main()
