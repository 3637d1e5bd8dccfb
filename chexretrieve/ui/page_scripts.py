"""Browser-side behaviour of the case lookup (JavaScript run by Gradio's ``gr.HTML(js_on_load=)``).

- ``RESULTS_JS``: a click (or Enter) on a result card or table row highlights it and sends
  ``pick`` with its case id; the server answers with the compare viewer.
- ``VIEWER_JS``: zoom (wheel, the +/−/Fit/1:1 buttons and the + / - / 0 / 1 keys) of both
  images together about the middle of the view, with synchronised scrolling; the label reads each
  image's true scale (stored pixels per screen pixel), 1:1 shows each at one stored pixel per
  screen pixel; zoomed in, the images are asked for at their stored size (``resolution``).
  Shift-drag pans; a drag on one image windows that image only (left/right = width, up/down =
  centre, in its own pixel values) with a live preview by an SVG linear transfer; the exact
  images follow from the server, sent a ``window`` (the pane, a dragged or typed centre / width)
  or a ``preset`` (a preset button: each image on its own values). While the viewer is open it
  keeps the keyboard focus: Tab and Shift-Tab cycle through its controls and never reach the
  page behind it; Escape closes it.
No data leaves the page but a case id or a window; nothing is fetched from elsewhere.
"""

from __future__ import annotations

RESULTS_JS = r"""
if (!element.dataset.cxBound) {
  element.dataset.cxBound = '1';
  const pick = (target) => {
    const item = target.closest('[data-case]');
    if (!item || !element.contains(item)) return;
    const id = Number(item.dataset.case);
    element.querySelectorAll('.cx-selected').forEach((e) => {
      e.classList.remove('cx-selected');
      if (e.hasAttribute('aria-pressed')) e.setAttribute('aria-pressed', 'false');
    });
    element.querySelectorAll('[data-case="' + id + '"]').forEach((e) => {
      e.classList.add('cx-selected');
      if (e.hasAttribute('aria-pressed')) e.setAttribute('aria-pressed', 'true');
    });
    trigger('pick', {case_id: id});
  };
  element.addEventListener('click', (event) => pick(event.target));
  element.addEventListener('keydown', (event) => {
    if ((event.key === 'Enter' || event.key === ' ') && event.target.matches('tr[data-case]')) {
      event.preventDefault();
      pick(event.target);
    }
  });
}
"""

VIEWER_JS = r"""
if (!element.dataset.cxBound) {
  element.dataset.cxBound = '1';
  // zoom: 'fit' (each image fitted to its pane), 'rel' (both at `factor` times their fitted
  // size: the same anatomy in both panes) or 'abs' (both at `factor` stored pixels per screen
  // pixel; 1 = 1:1); the label reads each image's true scale
  let zoom = {mode: 'fit', factor: 1};
  let drag = null;
  let syncing = false;
  let askedFull = false;
  const SENSITIVITY = 400;  // pixels of drag for a change of one value span
  const svgNS = 'http://www.w3.org/2000/svg';
  if (!document.getElementById('cx-window-filters')) {
    const svg = document.createElementNS(svgNS, 'svg');
    svg.setAttribute('id', 'cx-window-filters');
    svg.setAttribute('width', '0');
    svg.setAttribute('height', '0');
    svg.style.position = 'absolute';
    let defs = '';
    for (const side of ['query', 'result']) {
      defs += '<filter id="cx-win-' + side + '" color-interpolation-filters="sRGB">' +
        '<feComponentTransfer>' +
        ['R', 'G', 'B'].map((c) => '<feFunc' + c + ' type="linear" slope="1" intercept="0"/>')
          .join('') +
        '</feComponentTransfer></filter>';
    }
    svg.innerHTML = '<defs>' + defs + '</defs>';
    document.body.appendChild(svg);
  }
  const frames = () => Array.from(element.querySelectorAll('.cx-pane-frame'));
  const wantFull = () => zoom.mode !== 'fit';
  const storedSize = (img) => {  // in the image's stored pixels, whichever resolution is shown
    const stored = (img.dataset.stored || '').split('x').map(Number);
    return stored.length === 2 && stored[0] > 0 ? stored :
      [Number(img.getAttribute('width')), Number(img.getAttribute('height'))];
  };
  const fitOf = (img) => {
    const frame = img.parentElement;
    const natural = storedSize(img);
    return Math.min(frame.clientWidth / natural[0], frame.clientHeight / natural[1]);
  };
  const scaleOf = (img) => zoom.mode === 'abs' ? zoom.factor :
    fitOf(img) * (zoom.mode === 'rel' ? zoom.factor : 1);
  const percent = (value) => (value >= 10 ? value.toFixed(0) : value.toPrecision(2)) + ' %';
  const centreOf = (frame) => [
    (frame.scrollLeft + frame.clientWidth / 2) / Math.max(1, frame.scrollWidth),
    (frame.scrollTop + frame.clientHeight / 2) / Math.max(1, frame.scrollHeight),
  ];
  let lastCentres = null;  // where each view was centred (kept across a re-render)
  const applyZoom = (kept) => {
    // the point at the middle of each view stays there (a zoom never slides to a corner)
    const centres = kept || frames().map(centreOf);
    const scales = [];
    element.querySelectorAll('.cx-view-img').forEach((img) => {
      const scale = scaleOf(img);
      if (!(scale > 0)) return;
      scales.push([img.closest('.cx-pane').dataset.side, scale]);
      if (zoom.mode === 'fit') {  // fit: CSS (object-fit: contain) keeps the aspect ratio
        img.classList.remove('cx-zoomed');
        for (const key of ['width', 'height', 'maxWidth', 'maxHeight']) img.style[key] = '';
        return;
      }
      const natural = storedSize(img);
      img.classList.add('cx-zoomed');
      img.style.maxWidth = 'none';
      img.style.maxHeight = 'none';
      img.style.width = Math.max(1, natural[0] * scale) + 'px';
      img.style.height = Math.max(1, natural[1] * scale) + 'px';
    });
    syncing = true;
    frames().forEach((frame, i) => {
      const [cx, cy] = centres[i] || [0.5, 0.5];
      frame.scrollLeft = cx * frame.scrollWidth - frame.clientWidth / 2;
      frame.scrollTop = cy * frame.scrollHeight - frame.clientHeight / 2;
    });
    syncing = false;
    lastCentres = zoom.mode === 'fit' ? null : centres;
    const label = element.querySelector('.cx-zoom-level');
    if (label && scales.length) {
      const same = scales.every(([, v]) => Math.abs(v / scales[0][1] - 1) < 0.01);
      const text = same ? percent(100 * scales[0][1]) :
        scales.map(([side, v]) => side + ' ' + percent(100 * v)).join(' · ');
      label.textContent = (zoom.mode === 'fit' ? 'fit · ' : '') + text;
    }
    const reduced = element.querySelector('.cx-view-img[data-reduced="1"]');
    if (wantFull() && reduced && !askedFull) {  // zoomed in: the stored pixels, once per render
      askedFull = true;
      trigger('resolution', {full: true});
    }
  };
  const zoomBy = (step) => {
    if (zoom.mode === 'fit') zoom = {mode: 'rel', factor: 1};
    const factor = zoom.factor * step;
    if (zoom.mode === 'rel') {
      zoom = factor <= 1.0001 ? {mode: 'fit', factor: 1} :
        {mode: 'rel', factor: Math.min(8, factor)};
    } else {
      zoom = {mode: 'abs', factor: Math.min(16, Math.max(0.05, factor))};
    }
    applyZoom();
  };
  // the page-wide keys (+ / - / 0 / 1) zoom this viewer
  window.__cxViewerZoom = (how) => {
    if (how === 'in') zoomBy(1.5);
    else if (how === 'out') zoomBy(1 / 1.5);
    else {
      zoom = how === 'actual' ? {mode: 'abs', factor: 1} : {mode: 'fit', factor: 1};
      applyZoom();
    }
  };
  const syncScroll = (source) => {
    if (syncing) return;
    syncing = true;
    const fx = source.scrollLeft / Math.max(1, source.scrollWidth - source.clientWidth);
    const fy = source.scrollTop / Math.max(1, source.scrollHeight - source.clientHeight);
    frames().forEach((frame) => {
      if (frame === source) return;
      frame.scrollLeft = fx * (frame.scrollWidth - frame.clientWidth);
      frame.scrollTop = fy * (frame.scrollHeight - frame.clientHeight);
    });
    syncing = false;
  };
  element.addEventListener('scroll', (event) => {
    if (event.target.classList && event.target.classList.contains('cx-pane-frame')) {
      syncScroll(event.target);
      if (zoom.mode !== 'fit') lastCentres = frames().map(centreOf);
    }
  }, true);
  const typedWindow = (pane) => {
    if (!pane) return;
    const center = pane.querySelector('.cx-win-center');
    const width = pane.querySelector('.cx-win-width');
    trigger('window', {side: pane.dataset.side, center: center ? center.value : null,
                       width: width ? width.value : null, full: wantFull()});
  };
  element.addEventListener('click', (event) => {
    const preset = event.target.closest('[data-preset]');
    if (preset) {
      trigger('preset', {name: preset.dataset.preset, full: wantFull()});
      return;
    }
    if (event.target.closest('[data-apply]')) {
      typedWindow(event.target.closest('.cx-pane'));
      return;
    }
    const button = event.target.closest('[data-zoom]');
    if (!button) return;
    window.__cxViewerZoom(button.dataset.zoom);
  });
  element.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && event.target.matches('.cx-win-center, .cx-win-width')) {
      event.preventDefault();
      typedWindow(event.target.closest('.cx-pane'));
    }
  });
  element.addEventListener('load', (event) => {
    if (event.target.classList && event.target.classList.contains('cx-view-img')) {
      applyZoom(lastCentres);
    }
  }, true);
  element.addEventListener('wheel', (event) => {
    if (!event.target.closest('.cx-pane-frame')) return;
    event.preventDefault();
    zoomBy(event.deltaY < 0 ? 1.25 : 0.8);
  }, {passive: false});
  const number = (value) => Math.abs(value) >= 100 ? value.toFixed(0) : value.toPrecision(4);
  const preview = (pane, center, width) => {  // only the pane being dragged changes
    const slope = Number(pane.dataset.width) / width;
    let intercept = 0.5 * (1 - slope) + (Number(pane.dataset.center) - center) / width;
    if (pane.dataset.invert === '1') intercept = 1 - slope - intercept;
    const side = pane.dataset.side;
    document.querySelectorAll('#cx-win-' + side + ' feComponentTransfer > *').forEach((f) => {
      f.setAttribute('slope', String(slope));
      f.setAttribute('intercept', String(intercept));
    });
    const img = pane.querySelector('.cx-view-img');
    if (img) img.style.filter = 'url(#cx-win-' + side + ')';
    const readout = element.querySelector('.cx-window-readout');
    if (readout) {
      readout.textContent = side + ' C ' + number(center) + ' / W ' + number(width) +
        ' (set on this image; release to apply)';
    }
  };
  element.addEventListener('pointerdown', (event) => {
    const img = event.target.closest('.cx-view-img');
    const pane = img && img.closest('.cx-pane[data-center]');
    if (!img || !pane || event.button !== 0) return;
    event.preventDefault();
    const frame = img.parentElement;
    drag = {
      x: event.clientX, y: event.clientY, pan: event.shiftKey, frame: frame, pane: pane,
      left: frame.scrollLeft, top: frame.scrollTop,
      center: Number(pane.dataset.center), width: Number(pane.dataset.width),
      span: Number(pane.dataset.span), moved: false,
    };
    img.setPointerCapture(event.pointerId);
  });
  element.addEventListener('pointermove', (event) => {
    if (!drag) return;
    const dx = event.clientX - drag.x;
    const dy = event.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 2) drag.moved = true;
    if (drag.pan) {
      drag.frame.scrollLeft = drag.left - dx;
      drag.frame.scrollTop = drag.top - dy;
      return;
    }
    drag.newWidth = Math.max(1, drag.width + dx * drag.span / SENSITIVITY);
    drag.newCenter = drag.center + dy * drag.span / SENSITIVITY;
    preview(drag.pane, drag.newCenter, drag.newWidth);
  });
  const release = () => {
    if (!drag) return;
    const done = drag;
    drag = null;
    if (done.pan || !done.moved || done.newWidth === undefined) return;
    trigger('window', {side: done.pane.dataset.side, center: done.newCenter,
                       width: done.newWidth, full: wantFull()});
  };
  element.addEventListener('pointerup', release);
  element.addEventListener('pointercancel', release);
  watch('value', () => {
    askedFull = false;
    applyZoom(lastCentres);  // new pixels (a window, full resolution): the same place in view
    const overlay = document.getElementById('viewer');
    const box = element.querySelector('.cx-viewer');
    if (box && overlay && overlay.getClientRects().length > 0 &&
        !overlay.contains(document.activeElement)) {
      box.focus({preventScroll: true});  // an opened viewer takes the keyboard
    }
  });
  if (!window.__cxViewerKeys) {
    window.__cxViewerKeys = true;
    const overlayOpen = () => {
      const overlay = document.getElementById('viewer');
      return overlay && overlay.getClientRects().length > 0 ? overlay : null;
    };
    const focusables = (root) => Array.from(root.querySelectorAll(
      'button, input, select, textarea, a[href], [tabindex]:not([tabindex="-1"])'
    )).filter((e) => !e.disabled && e.getClientRects().length > 0);
    document.addEventListener('keydown', (event) => {
      const overlay = overlayOpen();
      if (!overlay) return;
      if (event.key === 'Escape') {
        const close = document.getElementById('viewer-close');
        if (close) close.click();
        return;
      }
      if (event.key === 'Tab') {  // keep the focus inside the viewer
        const items = focusables(overlay);
        if (items.length === 0) return;
        const at = items.indexOf(document.activeElement);
        let next = at + (event.shiftKey ? -1 : 1);
        if (at < 0) next = event.shiftKey ? items.length - 1 : 0;
        next = (next + items.length) % items.length;
        event.preventDefault();
        items[next].focus();
        return;
      }
      const typing = event.target.matches && event.target.matches('input, textarea, select');
      const zoomKey = {'+': 'in', '=': 'in', '-': 'out', '_': 'out', '0': 'fit',
                       '1': 'actual'}[event.key];
      if (zoomKey && !typing && !event.ctrlKey && !event.metaKey && window.__cxViewerZoom) {
        event.preventDefault();
        window.__cxViewerZoom(zoomKey);
      }
    });
    document.addEventListener('focusin', (event) => {  // focus that escaped goes back
      const overlay = overlayOpen();
      if (overlay && !overlay.contains(event.target)) {
        const items = focusables(overlay);
        if (items.length > 0) items[0].focus();
      }
    });
  }
  window.addEventListener('resize', () => applyZoom());
  new ResizeObserver(() => applyZoom()).observe(element);
}
"""
