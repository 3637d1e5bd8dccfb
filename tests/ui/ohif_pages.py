"""Driving the served OHIF viewer from the case lookup in Playwright (tests and screenshots).

``open_pair(page, query, result)`` searches by case ``query`` on the Gradio page, follows the
"Open in viewer" link of result ``result`` into a new tab and waits until OHIF shows an image in
two viewports; ``viewports(tab)`` reads, through the ``window.services`` OHIF exposes, what each
viewport shows (its image id, its VOI range and inversion, the image's rectangle on screen).
"""

from __future__ import annotations

CASE_ID = "#case-id textarea, #case-id input"

#: per viewport, in screen order (left to right): image id, properties, image rectangle (page
#: coordinates, CSS pixels) from the viewport's own world-to-canvas mapping
VIEWPORTS_JS = """() => {
  const service = window.services && window.services.cornerstoneViewportService;
  const engine = service && service.getRenderingEngine();
  if (!engine) return null;
  const shown = engine.getViewports().map((vp) => {
    const image = vp.getImageData ? vp.getImageData() : null;
    const imageId = vp.getCurrentImageId ? vp.getCurrentImageId() : null;
    if (!image || !imageId) return null;
    const [cols, rows] = image.dimensions;
    const data = image.imageData;  // vtkImageData: its own index-to-world mapping
    const at = (i, j) => data.indexToWorld([i, j, 0]);
    const a = vp.worldToCanvas(at(-0.5, -0.5)), b = vp.worldToCanvas(at(cols - 0.5, rows - 0.5));
    const box = vp.canvas.getBoundingClientRect();
    const props = vp.getProperties();
    return {
      imageId, cols, rows, invert: !!props.invert,
      voi: props.voiRange ? [props.voiRange.lower, props.voiRange.upper] : null,
      element: [box.x, box.y, box.width, box.height],
      rect: [box.x + Math.min(a[0], b[0]), box.y + Math.min(a[1], b[1]),
             Math.abs(b[0] - a[0]), Math.abs(b[1] - a[1])],
    };
  });
  if (shown.some((s) => s === null)) return null;
  return shown.sort((p, q) => p.element[0] - q.element[0]);
}"""


#: the viewports' VOI ranges ([lower, upper]), left to right
VOI_JS = """() => window.services.cornerstoneViewportService.getRenderingEngine().getViewports()
  .sort((p, q) => p.canvas.getBoundingClientRect().x - q.canvas.getBoundingClientRect().x)
  .map((vp) => [vp.getProperties().voiRange.lower, vp.getProperties().voiRange.upper])"""


def load_case(page, case_id: int) -> None:
    """Open archived case ``case_id`` as the query and wait for this load's results (a new
    serial, even for the same case again) with their viewer links, nothing still running."""
    before = page.evaluate(
        "() => { const r = document.querySelector('#results .cx-results');"
        " return r ? r.outerHTML : ''; }"
    )
    page.fill(CASE_ID, str(case_id))
    page.click("#load-case")
    page.wait_for_function(
        "([prev, id]) => { const e = document.querySelector('#results');"
        " const r = e && e.querySelector('.cx-results[data-serial]');"
        " const busy = e && e.querySelector('[data-testid=status-tracker]:not(.hide)');"
        " const t = r && r.querySelector('.cx-results-title');"
        " return r && r.outerHTML !== prev && !busy && t.innerText.includes('case ' + id) &&"
        " r.querySelector('a.cx-ohif'); }",
        arg=[before, case_id],
    )


def viewer_link(page, result: int) -> str:
    return page.get_attribute(
        f"#results .cx-card-cell:has(.cx-card[data-case='{result}']) a.cx-ohif", "href"
    )


def wait_for_viewports(tab, count: int = 2, timeout_ms: int = 120_000) -> list[dict]:
    """Wait until ``count`` viewports show an image and have rendered; what they show."""
    tab.wait_for_function(
        f"() => {{ const v = ({VIEWPORTS_JS})();"
        f" return v && v.length === {count} && v.every((x) => x.voi) ? v : null; }}",
        timeout=timeout_ms,
    )
    tab.wait_for_timeout(500)  # hang guard only for the last paint: values are re-read below
    return tab.evaluate(VIEWPORTS_JS)


def open_pair(page, query: int, result: int, server: str):
    """The OHIF tab for query ``query`` beside result ``result`` (count 2) and its viewports."""
    load_case(page, query)
    link = viewer_link(page, result)
    assert link and link.startswith("/viewer/open?"), link
    tab = page.context.new_page()
    tab.goto(server.rstrip("/") + link)
    return tab, wait_for_viewports(tab, 2)
