"""Radiographic signs of the 13 findings, drawn into a phantom's layers.

`adjust_anatomy` changes the geometry before the anatomy is drawn (heart, mediastinum, volume loss,
rib fractures); `draw_signs` draws everything else afterwards.
"""

from __future__ import annotations

import numpy as np

from chexretrieve.phantom.anatomy import Anatomy, Layers, lung_level
from chexretrieve.phantom.canvas import (
    Frame,
    bezier,
    polyline_in_frame,
    ramp,
    smooth_field,
)

#: body-coordinate centres (mirrored lateral xm, y) of lung zones
ZONES = {
    "upper": (0.42, -0.38),
    "middle": (0.38, 0.08),
    "lingula": (0.4, 0.1),
    "lower": (0.5, 0.3),
}


def _sides(side: str) -> list[int]:
    """'right' -> [-1] (patient right is image left), 'left' -> [1], 'bilateral' -> both."""
    return {"right": [-1], "left": [1], "bilateral": [-1, 1]}[side]


def adjust_anatomy(anatomy: Anatomy, attrs: dict[str, dict]) -> None:
    """Geometry changes caused by findings (applied before drawing the anatomy)."""
    if "Cardiomegaly" in attrs:
        f = 1.28 + 0.32 * attrs["Cardiomegaly"]["severity"]
        a, b = anatomy.heart_axes
        cx, cy = anatomy.heart_center
        anatomy.heart_axes = (a * f, b * (1 + 0.6 * (f - 1)))
        anatomy.heart_center = (cx + 0.13 * (f - 1), cy + 0.12 * (f - 1))
    if "Enlarged Cardiomediastinum" in attrs:
        anatomy.mediastinum_widening = 1.55 + 0.7 * attrs["Enlarged Cardiomediastinum"]["severity"]
        anatomy.knob *= 1.6
    if "Atelectasis" in attrs:
        at = attrs["Atelectasis"]
        dome = list(anatomy.dome)
        for side in _sides(at["side"]):
            dome[0 if side < 0 else 1] -= 0.05 + 0.08 * at["severity"]
            if at["side"] != "bilateral":
                anatomy.mid_x += side * 0.02 * at["severity"]
        anatomy.dome = (dome[0], dome[1])
    if "Fracture" in attrs:
        fr = attrs["Fracture"]
        breaks = []
        for side in _sides(fr["side"]):
            for rib in fr["ribs"]:
                xm = fr["position"] * anatomy.lung_scale
                # rib centre line height at xm for rib number `rib`
                y = _rib_y(anatomy, rib, xm)
                breaks.append((xm, y, 0.28 + 0.2 * fr["severity"], side))
        anatomy.extra["rib_fractures"] = breaks


def _rib_y(anatomy: Anatomy, rib: int, xm: float) -> float:
    """Height of the middle of posterior rib `rib` at lateral position xm (inverts the phase)."""
    target = rib + 0.21
    sp = anatomy.rib_spacing
    # phase = u/sp - 0.55 u^2/sp  ->  0.55 u^2 - u + target*sp = 0
    disc = max(1.0 - 4 * 0.55 * target * sp, 0.0)
    u = (1.0 - np.sqrt(disc)) / (2 * 0.55)
    return float(u + (-0.16 * xm + 0.5 * xm * xm) + (anatomy.lung_top - 0.05) + anatomy.rib_phase)


def draw_signs(
    frame: Frame, anatomy: Anatomy, layers: Layers, attrs: dict[str, dict], seed_of
) -> None:
    """Draw every finding in `attrs`; `seed_of(name)` gives that finding's random generator."""
    if "Edema" in attrs:
        _edema(frame, anatomy, layers, attrs["Edema"], seed_of("Edema"))
    for name in ("Consolidation", "Pneumonia"):
        if name in attrs:
            _airspace(frame, anatomy, layers, attrs[name], seed_of(name), name)
    if "Lung Opacity" in attrs and attrs["Lung Opacity"].get("isolated"):
        _airspace(frame, anatomy, layers, attrs["Lung Opacity"], seed_of("Lung Opacity"), "haze")
    if "Atelectasis" in attrs:
        _atelectasis(frame, anatomy, layers, attrs["Atelectasis"], seed_of("Atelectasis"))
    if "Lung Lesion" in attrs:
        _lesion(frame, anatomy, layers, attrs["Lung Lesion"], seed_of("Lung Lesion"))
    if "Pleural Effusion" in attrs:
        _effusion(frame, anatomy, layers, attrs["Pleural Effusion"])
    if "Pneumothorax" in attrs:
        _pneumothorax(frame, anatomy, layers, attrs["Pneumothorax"])
    if "Pleural Other" in attrs:
        _pleural_other(frame, anatomy, layers, attrs["Pleural Other"], seed_of("Pleural Other"))
    if "Fracture" in attrs:
        _fracture_callus(frame, anatomy, layers)
    if "Support Devices" in attrs:
        _devices(frame, anatomy, layers, attrs["Support Devices"], seed_of("Support Devices"))


def _hemithorax(frame: Frame, anatomy: Anatomy, side: int, y0: float = -0.8, y1: float = 0.9):
    x_lo, x_hi = anatomy.side_x(side, -0.05), anatomy.side_x(side, 0.95 * anatomy.lung_scale)
    return frame.window(min(x_lo, x_hi), max(x_lo, x_hi), y0, y1)


def _edema(frame, anatomy, layers, a, rng) -> None:
    sev = a["severity"]
    for side in (-1, 1):
        win = _hemithorax(frame, anatomy, side)
        if win is None:
            continue
        xm = side * (win.X - anatomy.mid_x)
        # perihilar "bat wing" haze
        r2 = ((xm - 0.22) / (0.3 + 0.15 * sev)) ** 2 + ((win.Y + 0.02) / (0.38 + 0.12 * sev)) ** 2
        haze = np.clip(1.0 - r2, 0.0, 1.0) ** 0.7 * (0.35 + 0.45 * sev)
        # general interstitial density
        haze = haze + 0.12 + 0.1 * sev
        layers.fill[win.sl] = np.maximum(layers.fill[win.sl], haze)
        # Kerley B lines: short horizontal lines at the lateral bases
        lat = 0.84 * anatomy.lung_scale
        dome = anatomy.dome[0 if side < 0 else 1]
        for k in range(int(5 + 5 * sev)):
            y = dome - 0.02 - k * 0.028 - rng.uniform(0, 0.012)
            length = rng.uniform(0.05, 0.09)
            x0 = lat - 0.02 - rng.uniform(0.0, 0.04)
            xs = anatomy.side_x(side, np.array([x0 - length, x0]))
            polyline_in_frame(frame, layers.lines, xs, np.array([y, y]), 0.007, 0.5)


def _airspace(frame, anatomy, layers, a, rng, kind: str) -> None:
    """Consolidation: dense, fairly sharp lobar opacity with air bronchograms. Pneumonia: patchy
    ill-defined opacity. Isolated lung opacity ('haze'): faint ground-glass area."""
    sev = a["severity"]
    for side in _sides(a["side"]):
        cx, cy = ZONES[a["zone"]]
        cx, cy = cx + rng.uniform(-0.06, 0.06), cy + rng.uniform(-0.06, 0.06)
        rx, ry = (0.14 + 0.12 * sev), (0.11 + 0.1 * sev)
        x0, x1 = anatomy.side_x(side, cx - rx - 0.05), anatomy.side_x(side, cx + rx + 0.05)
        win = frame.window(min(x0, x1), max(x0, x1), cy - ry - 0.05, cy + ry + 0.05)
        if win is None:
            continue
        xm = side * (win.X - anatomy.mid_x)
        r2 = ((xm - cx) / rx) ** 2 + ((win.Y - cy) / ry) ** 2
        field = smooth_field(win.X.shape, max(win.X.shape[0] / 6.0, 2.0), rng)
        if kind == "Consolidation":
            blob = ramp(1.0 - r2 + 0.25 * field, 0.15) * (0.75 + 0.2 * sev)
            bronch = smooth_field(win.X.shape, max(win.X.shape[0] / 14.0, 1.5), rng)
            air = ramp(0.12 - np.abs(bronch), 0.06) * ramp(0.7 - r2, 0.3) * 0.35
            blob = blob * (1.0 - air)
        elif kind == "Pneumonia":
            patches = ramp(field + 0.6 - 1.3 * r2, 0.5)
            blob = patches * (0.45 + 0.4 * sev)
        else:
            blob = ramp(1.0 - r2 + 0.3 * field, 0.6) * (0.3 + 0.25 * sev)
        layers.fill[win.sl] = np.maximum(layers.fill[win.sl], blob)


def _atelectasis(frame, anatomy, layers, a, rng) -> None:
    sev = a["severity"]
    for side in _sides(a["side"]):
        dome = anatomy.dome[0 if side < 0 else 1]
        y_c = dome - (0.1 if a["zone"] == "lower" else 0.3) + rng.uniform(-0.03, 0.03)
        cx = 0.42 + rng.uniform(-0.05, 0.05)
        half = 0.16 + 0.1 * sev
        x0, x1 = anatomy.side_x(side, cx - half - 0.05), anatomy.side_x(side, cx + half + 0.05)
        win = frame.window(min(x0, x1), max(x0, x1), y_c - 0.15, y_c + 0.15)
        if win is None:
            continue
        xm = side * (win.X - anatomy.mid_x)
        centre = y_c + a["tilt"] * (xm - cx)
        thick = 0.014 + 0.02 * sev
        plate = ramp(thick - np.abs(win.Y - centre), 0.012) * ramp(half - np.abs(xm - cx), 0.05)
        # a little streaky haze around the plate (subsegmental collapse)
        haze = ramp(0.06 - np.abs(win.Y - centre), 0.06) * ramp(half - np.abs(xm - cx), 0.08)
        layers.fill[win.sl] = np.maximum(layers.fill[win.sl], 0.95 * plate + 0.25 * haze)


def _lesion(frame, anatomy, layers, a, rng) -> None:
    sev = a["severity"]
    for side in _sides(a["side"]):
        for sx, sy, shape in a["spots"]:
            radius = (0.05 + 0.04 * sev) if a["kind"] == "mass" else (0.018 + 0.018 * sev)
            radius *= 1.8 if a["kind"] == "mass" else 1.0
            y = sy
            x0, x1 = (
                anatomy.side_x(side, sx - radius * 1.5),
                anatomy.side_x(side, sx + radius * 1.5),
            )
            win = frame.window(min(x0, x1), max(x0, x1), y - radius * 1.5, y + radius * 1.5)
            if win is None:
                continue
            xm = side * (win.X - anatomy.mid_x)
            dx, dy = xm - sx, win.Y - y
            r = np.sqrt(dx * dx + dy * dy)
            if a["kind"] == "mass":
                # lobulated outline
                angle = np.arctan2(dy, dx)
                radius_at = radius * (
                    1.0
                    + 0.12 * np.sin(3 * angle + 6 * shape)
                    + 0.07 * np.sin(5 * angle + 2 * shape)
                )
            else:
                radius_at = radius
            core = ramp(radius_at - r, radius * 0.15)
            profile = np.sqrt(np.clip(1.0 - (r / (radius_at + 1e-6)) ** 2, 0.0, 1.0))
            layers.dense[win.sl] += core * (0.1 + 0.1 * profile)
            layers.fill[win.sl] = np.maximum(layers.fill[win.sl], core * 0.6)


def _effusion(frame, anatomy, layers, a) -> None:
    sides = _sides(a["side"])
    for i, side in enumerate(sides):
        sev = a["severity"] if i == 0 else a["severity_other"]
        win = _hemithorax(frame, anatomy, side, -0.7, 1.0)
        if win is None:
            continue
        xm = side * (win.X - anatomy.mid_x)
        dome = anatomy.dome[0 if side < 0 else 1]
        level = dome + 0.04 - 0.55 * sev**1.4
        lat = 0.86 * anatomy.lung_scale
        # meniscus: the fluid climbs the lateral chest wall
        climb = (0.06 + 0.12 * sev) * ramp(xm - (lat - 0.35), 0.35) ** 2
        surface = level - climb
        fluid = ramp(win.Y - surface, 0.04 + 0.05 * sev) * ramp(lat + 0.02 - xm, 0.02)
        fluid *= ramp(xm + 0.02, 0.04)
        layers.fill[win.sl] = np.maximum(layers.fill[win.sl], fluid * (0.85 + 0.15 * sev))
        # the fluid also covers the costophrenic recess below the dome line
        layers.soft[win.sl] += fluid * ramp(lat - xm, 0.03) * 0.03


def _pneumothorax(frame, anatomy, layers, a) -> None:
    sev = a["severity"]
    shrink = 0.88 - 0.3 * sev
    for side in _sides(a["side"]):
        win = _hemithorax(frame, anatomy, side, -0.8, 0.7)
        if win is None:
            continue
        outer = lung_level(anatomy, side, win.X, win.Y)
        inner = lung_level(anatomy, side, win.X, win.Y, shrink=shrink)
        space = ramp(-outer, 0.03) * ramp(inner, 0.015)
        line = ramp(0.035 - np.abs(inner + 0.02), 0.02) * ramp(-outer, 0.05)
        layers.markings[win.sl] *= 1.0 - space
        layers.lucent[win.sl] += space * 0.08
        layers.lines[win.sl] = np.maximum(layers.lines[win.sl], line * 0.55)


def _pleural_other(frame, anatomy, layers, a, rng) -> None:
    sev = a["severity"]
    for side in _sides(a["side"]):
        win = _hemithorax(frame, anatomy, side, -0.8, 0.8)
        if win is None:
            continue
        level = lung_level(anatomy, side, win.X, win.Y)
        if a["kind"] == "thickening":
            y0 = -0.3 + rng.uniform(-0.1, 0.1)
            band = ramp(level + 0.12 + 0.1 * sev, 0.04) * ramp(0.02 - level, 0.02)
            band *= ramp(win.Y - y0, 0.1) * ramp(0.6 - win.Y, 0.1)
            layers.fill[win.sl] = np.maximum(layers.fill[win.sl], band * 0.9)
        elif a["kind"] == "apical cap":
            band = ramp(level + 0.15 + 0.15 * sev, 0.05) * ramp(0.02 - level, 0.02)
            band *= ramp(-0.35 - win.Y, 0.08)
            layers.fill[win.sl] = np.maximum(layers.fill[win.sl], band * 0.95)
        else:
            edge = ramp(level + 0.25, 0.05) * ramp(0.04 - level, 0.02)
            field = smooth_field(win.X.shape, max(win.X.shape[0] / 18.0, 1.5), rng)
            plaques = ramp(field - 1.0 + 0.5 * sev, 0.25) * edge
            layers.lines[win.sl] = np.maximum(layers.lines[win.sl], plaques * 0.6)


def _fracture_callus(frame, anatomy, layers) -> None:
    for xm, y, _shift, side in anatomy.extra.get("rib_fractures", []):
        x = anatomy.side_x(side, xm)
        win = frame.window(x - 0.05, x + 0.05, y - 0.05, y + 0.05)
        if win is None:
            continue
        r2 = ((win.X - x) / 0.03) ** 2 + ((win.Y - y) / 0.045) ** 2
        layers.dense[win.sl] += ramp(1.0 - r2, 0.5) * 0.03


def _devices(frame, anatomy, layers, a, rng) -> None:
    m = anatomy.mid_x
    canvas = layers.metal
    for device in a["devices"]:
        if device == "endotracheal tube":
            tip = -0.36 + rng.uniform(-0.06, 0.04)
            xs, ys = bezier([(m + 0.01, -1.3), (m + 0.02, -0.8), (m - 0.005, tip)], 40)
            polyline_in_frame(frame, canvas, xs, ys, 0.016, 0.85)
            polyline_in_frame(frame, canvas, xs + 0.008, ys, 0.004, 1.0)
        elif device == "enteric tube":
            xs, ys = bezier(
                [
                    (m - 0.02, -1.3),
                    (m + 0.02, -0.2),
                    (m + 0.05, 0.4),
                    (m + 0.3, 0.55),
                    (m + 0.35, 0.75),
                ],
                80,
            )
            polyline_in_frame(frame, canvas, xs, ys, 0.009, 0.9)
        elif device == "central line":
            side = -1 if rng.random() < 0.7 else 1
            xs, ys = bezier(
                [
                    (m + side * 0.55, -0.72),
                    (m + side * 0.25, -0.66),
                    (m + side * 0.04 - 0.08, -0.5),
                    (m - 0.07, -0.12),
                ],
                60,
            )
            polyline_in_frame(frame, canvas, xs, ys, 0.008, 0.9)
        elif device == "pacemaker":
            gx, gy = m + 0.55, -0.72
            win = frame.window(gx - 0.12, gx + 0.12, gy - 0.1, gy + 0.1)
            if win is not None:
                box = ramp(0.09 - np.abs(win.X - gx), 0.01) * ramp(0.065 - np.abs(win.Y - gy), 0.01)
                canvas[win.sl] = np.maximum(canvas[win.sl], box)
            hx, hy = anatomy.heart_center
            for lead in range(int(rng.integers(1, 3))):
                xs, ys = bezier(
                    [
                        (gx - 0.05, gy + 0.03),
                        (m - 0.05, -0.55),
                        (m - 0.1, -0.1),
                        (hx - 0.05 + 0.12 * lead, hy + 0.1),
                    ],
                    80,
                )
                polyline_in_frame(frame, canvas, xs, ys, 0.008, 0.95)
        elif device == "chest tube":
            side = 1 if rng.random() < 0.5 else -1
            xs, ys = bezier(
                [
                    (m + side * 1.1, 0.35),
                    (m + side * 0.75, 0.3),
                    (m + side * 0.55, -0.1),
                    (m + side * 0.4, -0.45),
                ],
                60,
            )
            polyline_in_frame(frame, canvas, xs, ys, 0.02, 0.8)
            polyline_in_frame(frame, canvas, xs, ys, 0.006, 1.0)
