"""Radiographic signs of the 13 findings, drawn into a phantom's layers.

`adjust_anatomy` changes the geometry before the anatomy is drawn (heart, mediastinum, volume loss,
rib fractures); `draw_signs` draws everything else afterwards. Smooth signs go on the layers' `lo`
frame, thin lines and devices on `hi`.
"""

from __future__ import annotations

import numpy as np

from chexretrieve.phantom.anatomy import (
    RIB_ARCH,
    RIB_CHIRP,
    RIB_WIDTH,
    Anatomy,
    Layers,
    hemithorax_window,
    lung_level,
)
from chexretrieve.phantom.canvas import Frame, bezier, polyline_in_frame, ramp, smooth_field

#: body-coordinate centres (mirrored lateral xm, y) of lung zones
ZONES = {
    "upper": (0.42, -0.36),
    "middle": (0.36, 0.08),
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
        anatomy.mediastinum_widening = 1.6 + 0.8 * attrs["Enlarged Cardiomediastinum"]["severity"]
        anatomy.knob *= 1.2
    if "Atelectasis" in attrs:
        at = attrs["Atelectasis"]
        dome = list(anatomy.dome)
        for side in _sides(at["side"]):
            dome[0 if side < 0 else 1] -= 0.05 + 0.08 * at["severity"]
            if at["side"] != "bilateral":
                anatomy.mid_x += side * 0.025 * at["severity"]
        anatomy.dome = (dome[0], dome[1])
    if "Fracture" in attrs:
        fr = attrs["Fracture"]
        breaks = []
        for side in _sides(fr["side"]):
            for k, rib in enumerate(fr["ribs"]):
                xm = (fr["position"] + 0.04 * (k % 2)) * anatomy.lung_scale
                breaks.append((xm, rib, 0.3 + 0.15 * fr["severity"], side))
        anatomy.extra["rib_fractures"] = breaks


def rib_y(anatomy: Anatomy, rib: int, xm: float) -> float:
    """Height of the middle of posterior rib `rib` at lateral position xm (inverts rib_phase)."""
    target = rib + RIB_WIDTH / 2
    sp = anatomy.rib_spacing
    # phase = (u - c u^2) / sp  ->  c u^2 - u + target sp = 0, the smaller root
    disc = max(1.0 - 4 * RIB_CHIRP * target * sp, 0.0)
    u = (1.0 - np.sqrt(disc)) / (2 * RIB_CHIRP)
    return float(u + xm * (RIB_ARCH * xm - 0.24) + (anatomy.lung_top - 0.05) + anatomy.rib_phase)


def draw_signs(anatomy: Anatomy, layers: Layers, attrs: dict[str, dict], seed_of) -> None:
    """Draw every finding in `attrs`; `seed_of(name)` gives that finding's random generator."""
    if "Edema" in attrs:
        _edema(anatomy, layers, attrs["Edema"], seed_of("Edema"))
    for name in ("Consolidation", "Pneumonia"):
        if name in attrs:
            _airspace(layers.lo, anatomy, layers, attrs[name], seed_of(name), name)
    if "Lung Opacity" in attrs and attrs["Lung Opacity"].get("isolated"):
        _airspace(
            layers.lo, anatomy, layers, attrs["Lung Opacity"], seed_of("Lung Opacity"), "haze"
        )
    if "Atelectasis" in attrs:
        _atelectasis(layers.lo, anatomy, layers, attrs["Atelectasis"], seed_of("Atelectasis"))
    if "Lung Lesion" in attrs:
        _lesion(anatomy, layers, attrs["Lung Lesion"])
    if "Pleural Effusion" in attrs:
        _effusion(layers.lo, anatomy, layers, attrs["Pleural Effusion"])
    if "Pneumothorax" in attrs:
        _pneumothorax(layers.lo, anatomy, layers, attrs["Pneumothorax"])
    if "Pleural Other" in attrs:
        _pleural_other(anatomy, layers, attrs["Pleural Other"], seed_of("Pleural Other"))
    if "Fracture" in attrs:
        _fracture_callus(layers.lo, anatomy, layers)
    if "Support Devices" in attrs:
        _devices(layers.hi, anatomy, layers, attrs["Support Devices"], seed_of("Support Devices"))


def _edema(anatomy: Anatomy, layers: Layers, a: dict, rng: np.random.Generator) -> None:
    sev = a["severity"]
    for side in (-1, 1):
        win = hemithorax_window(layers.lo, anatomy, side)
        if win is None:
            continue
        xm = side * (win.X - anatomy.mid_x)
        # perihilar "bat wing" haze fading to the periphery, over a general interstitial haze
        r2 = ((xm - 0.22) * (1 / (0.3 + 0.15 * sev))) ** 2
        r2 += ((win.Y + 0.02) * (1 / (0.38 + 0.12 * sev))) ** 2
        haze = np.sqrt(ramp(1.0 - r2, 1.0)) * (0.35 + 0.4 * sev) + (0.15 + 0.1 * sev)
        np.maximum(layers.fill[win.sl], haze, out=layers.fill[win.sl])
        # Kerley B lines: short horizontal lines at the lateral lung bases
        lat = 0.84 * anatomy.lung_scale
        dome = anatomy.dome[0 if side < 0 else 1]
        for k in range(int(5 + 6 * sev)):
            y = dome + 0.02 - k * 0.026 - rng.uniform(0, 0.01)
            length = rng.uniform(0.05, 0.09)
            x0 = lat - 0.03 - rng.uniform(0.0, 0.03) - 0.12 * max(0.0, y - dome + 0.05)
            xs = anatomy.side_x(side, np.array([x0 - length, x0]))
            polyline_in_frame(layers.hi, layers.lines, xs, np.array([y, y]), 0.008, 0.8)


def _airspace(frame: Frame, anatomy: Anatomy, layers: Layers, a: dict, rng, kind: str) -> None:
    """Consolidation: dense, fairly sharp opacity with air bronchograms. Pneumonia: several patchy,
    ill-defined opacities. Isolated lung opacity ('haze'): a faint ground-glass area."""
    sev = a["severity"]
    for side in _sides(a["side"]):
        cx, cy = ZONES[a["zone"]]
        cx, cy = cx + rng.uniform(-0.05, 0.05), cy + rng.uniform(-0.05, 0.05)
        rx, ry = (0.14 + 0.12 * sev), (0.11 + 0.1 * sev)
        if kind == "Pneumonia":
            rx, ry = rx * 1.3, ry * 1.3
        x0, x1 = anatomy.side_x(side, cx - rx - 0.05), anatomy.side_x(side, cx + rx + 0.05)
        win = frame.window(min(x0, x1), max(x0, x1), cy - ry - 0.05, cy + ry + 0.05)
        if win is None:
            continue
        xm = side * (win.X - anatomy.mid_x)
        r2 = ((xm - cx) * (1 / rx)) ** 2 + ((win.Y - cy) * (1 / ry)) ** 2
        field = smooth_field(win.X.shape, max(win.X.shape[0] / 7.0, 1.5), rng)
        if kind == "Consolidation":
            blob = ramp(1.0 - r2 + 0.2 * field, 0.12) * (0.8 + 0.2 * sev)
            bronch = smooth_field(win.X.shape, max(win.X.shape[0] / 12.0, 1.2), rng)
            air = ramp(0.15 - np.abs(bronch), 0.07) * ramp(0.75 - r2, 0.3)
            blob *= 1.0 - 0.45 * air
        elif kind == "Pneumonia":
            fine = smooth_field(win.X.shape, max(win.X.shape[0] / 14.0, 1.2), rng)
            patches = ramp(0.8 * field + 0.6 * fine + 0.5 - 1.3 * r2, 1.3)
            blob = patches * (0.55 + 0.3 * sev)
        else:
            blob = ramp(1.0 - r2 + 0.3 * field, 0.7) * (0.4 + 0.3 * sev)
        np.maximum(layers.fill[win.sl], blob, out=layers.fill[win.sl])


def _atelectasis(frame: Frame, anatomy: Anatomy, layers: Layers, a: dict, rng) -> None:
    sev = a["severity"]
    for side in _sides(a["side"]):
        dome = anatomy.dome[0 if side < 0 else 1]
        y_c = dome - (0.1 if a["zone"] == "lower" else 0.3) + rng.uniform(-0.03, 0.03)
        cx = 0.45 + rng.uniform(-0.05, 0.05)
        half = 0.17 + 0.1 * sev
        x0, x1 = anatomy.side_x(side, cx - half - 0.05), anatomy.side_x(side, cx + half + 0.05)
        win = frame.window(min(x0, x1), max(x0, x1), y_c - 0.15, y_c + 0.15)
        if win is None:
            continue
        xm = side * (win.X - anatomy.mid_x)
        centre = y_c + a["tilt"] * (xm - cx)
        thick = 0.016 + 0.02 * sev
        along = ramp(half - np.abs(xm - cx), 0.06)
        centre = centre + 0.6 * (xm - cx) ** 2
        plate = ramp(thick - np.abs(win.Y - centre), 0.016) * along
        # streaky haze around the plate (subsegmental collapse)
        haze = ramp(0.07 - np.abs(win.Y - centre), 0.07) * along
        np.maximum(layers.fill[win.sl], 0.85 * plate + 0.3 * haze, out=layers.fill[win.sl])


def _lesion(anatomy: Anatomy, layers: Layers, a: dict) -> None:
    sev = a["severity"]
    mass = a["kind"] == "mass"
    radius = (0.07 + 0.06 * sev) if mass else (0.03 + 0.02 * sev)
    for side in _sides(a["side"]):
        for sx, sy, shape in a["spots"]:
            for frame, target in ((layers.lo, "dense"), (layers.lo, "fill")):
                x0 = anatomy.side_x(side, sx - radius * 1.3)
                x1 = anatomy.side_x(side, sx + radius * 1.3)
                win = frame.window(min(x0, x1), max(x0, x1), sy - radius * 1.3, sy + radius * 1.3)
                if win is None:
                    continue
                xm = side * (win.X - anatomy.mid_x)
                dx, dy = xm - sx, win.Y - sy
                r = np.sqrt(dx * dx + dy * dy)
                edge = radius
                if mass:
                    # lobulated outline
                    angle = np.arctan2(dy, dx)
                    edge = radius * (
                        1.0 + 0.12 * np.sin(3 * angle + 6 * shape) + 0.07 * np.sin(5 * angle + 2)
                    )
                core = ramp(edge - r, radius * (0.3 if mass else 0.15))
                if target == "dense":
                    profile = np.sqrt(ramp(1.0 - (r / edge) ** 2, 1.0))
                    layers.dense[win.sl] += core * (0.03 + 0.06 * profile)
                else:
                    np.maximum(layers.fill[win.sl], core * 0.6, out=layers.fill[win.sl])


def _effusion(frame: Frame, anatomy: Anatomy, layers: Layers, a: dict) -> None:
    for i, side in enumerate(_sides(a["side"])):
        sev = a["severity"] if i == 0 else a["severity_other"]
        win = hemithorax_window(frame, anatomy, side, -0.7, 1.0)
        if win is None:
            continue
        xm = side * (win.X - anatomy.mid_x)
        dome = anatomy.dome[0 if side < 0 else 1]
        level = dome + 0.08 - 0.6 * sev**1.3
        lat = 0.86 * anatomy.lung_scale
        # meniscus: the fluid surface is concave and climbs the lateral chest wall
        t = ramp(xm - (lat - 0.7), 0.7)
        climb = (0.12 + 0.22 * sev) * t * t
        depth = win.Y - (level - climb)
        fluid = ramp(depth, 0.07 + 0.06 * sev) * (0.75 + 0.25 * ramp(depth, 0.25))
        fluid *= ramp(lat + 0.03 - xm, 0.02)
        np.maximum(layers.fill[win.sl], fluid, out=layers.fill[win.sl])
        layers.soft[win.sl] += fluid * np.float32(0.04)


def _pneumothorax(frame: Frame, anatomy: Anatomy, layers: Layers, a: dict) -> None:
    sev = a["severity"]
    shrink = 0.86 - 0.3 * sev
    for side in _sides(a["side"]):
        win = hemithorax_window(frame, anatomy, side, -0.8, 0.7)
        if win is None:
            continue
        outer = lung_level(anatomy, side, win.X, win.Y)
        inner = lung_level(anatomy, side, win.X, win.Y, shrink=shrink)
        inside = ramp(-outer, 0.03)
        space = inside * ramp(inner, 0.02)
        line = ramp(0.05 - np.abs(inner + 0.025), 0.025) * inside
        layers.markings[win.sl] *= 1.0 - space
        layers.lucent[win.sl] += space * 0.08
        layers.soft[win.sl] += line * 0.1


def _pleural_other(anatomy: Anatomy, layers: Layers, a: dict, rng) -> None:
    sev = a["severity"]
    for side in _sides(a["side"]):
        if a["kind"] == "plaques":
            _plaques(layers.lo, anatomy, layers, side, sev, rng)
            continue
        win = hemithorax_window(layers.lo, anatomy, side, -0.85, 0.8)
        if win is None:
            continue
        level = lung_level(anatomy, side, win.X, win.Y)
        if a["kind"] == "thickening":
            # a band along the lateral chest wall
            y0 = -0.4 + rng.uniform(-0.1, 0.1)
            xm = side * (win.X - anatomy.mid_x)
            band = ramp(level + 0.3 + 0.25 * sev, 0.08) * ramp(0.03 - level, 0.03)
            band *= ramp(xm - 0.55 * anatomy.lung_scale, 0.08)
            band *= ramp(win.Y - y0, 0.1) * ramp(anatomy.dome[0 if side < 0 else 1] - win.Y, 0.15)
        else:  # apical cap
            band = ramp(level + 0.3 + 0.3 * sev, 0.08) * ramp(0.03 - level, 0.03)
            band *= ramp(anatomy.lung_top + 0.3 + 0.1 * sev - win.Y, 0.08)
        np.maximum(layers.fill[win.sl], band, out=layers.fill[win.sl])
        layers.soft[win.sl] += band * 0.05


def _plaques(frame: Frame, anatomy: Anatomy, layers: Layers, side: int, sev: float, rng) -> None:
    """Calcified pleural plaques: dense irregular patches along the lateral wall and diaphragm."""
    count = int(4 + 4 * sev)
    for _ in range(count):
        y = float(rng.uniform(-0.4, anatomy.dome[0 if side < 0 else 1]))
        xm = 0.8 * anatomy.lung_scale - 0.05 * max(0.0, y) + rng.uniform(-0.08, 0.0)
        long, short = rng.uniform(0.05, 0.1), rng.uniform(0.018, 0.03)
        x = anatomy.side_x(side, xm)
        win = frame.window(x - long, x + long, y - long, y + long)
        if win is None:
            continue
        dx, dy = win.X - x, win.Y - y
        # elongated along the chest wall, with a ragged ("holly leaf") edge
        e = (dx * (1 / short)) ** 2 + (dy * (1 / long)) ** 2
        edge = 1.0 + 0.25 * np.sin(dy * (60 + 40 * rng.random()) + rng.uniform(0, 6))
        layers.dense[win.sl] += ramp(edge - e, 0.4) * (0.12 + 0.08 * sev)


def _fracture_callus(frame: Frame, anatomy: Anatomy, layers: Layers) -> None:
    for xm, rib, _shift, side in anatomy.extra.get("rib_fractures", []):
        x, y = anatomy.side_x(side, xm), rib_y(anatomy, rib, xm)
        win = frame.window(x - 0.06, x + 0.06, y - 0.06, y + 0.06)
        if win is None:
            continue
        # callus and extrapleural haematoma around the break
        r2 = ((win.X - x) * (1 / 0.04)) ** 2 + ((win.Y - y) * (1 / 0.05)) ** 2
        layers.dense[win.sl] += ramp(1.0 - r2, 0.7) * 0.06


def _devices(frame: Frame, anatomy: Anatomy, layers: Layers, a: dict, rng) -> None:
    m = anatomy.mid_x
    canvas = layers.metal
    for device in a["devices"]:
        if device == "endotracheal tube":
            tip = -0.36 + rng.uniform(-0.06, 0.04)
            xs, ys = bezier([(m + 0.01, -1.3), (m + 0.02, -0.8), (m - 0.005, tip)], 40)
            polyline_in_frame(frame, canvas, xs, ys, 0.032, 0.45)
            polyline_in_frame(frame, canvas, xs + 0.01, ys, 0.012, 1.0)
        elif device == "enteric tube":
            points = [(m - 0.02, -1.3), (m + 0.02, -0.2), (m + 0.05, 0.4), (m + 0.3, 0.55)]
            xs, ys = bezier([*points, (m + 0.35, 0.75)], 80)
            polyline_in_frame(frame, canvas, xs, ys, 0.016, 0.9)
        elif device == "central line":
            side = -1 if rng.random() < 0.7 else 1
            points = [(m + side * 0.6, -0.74), (m + side * 0.25, -0.66)]
            xs, ys = bezier([*points, (m + side * 0.04 - 0.08, -0.5), (m - 0.07, -0.12)], 60)
            polyline_in_frame(frame, canvas, xs, ys, 0.014, 0.9)
        elif device == "pacemaker":
            gx, gy = m + 0.55, -0.72
            win = frame.window(gx - 0.12, gx + 0.12, gy - 0.1, gy + 0.1)
            if win is not None:
                box = ramp(0.09 - np.abs(win.X - gx), 0.01) * ramp(0.065 - np.abs(win.Y - gy), 0.01)
                np.maximum(canvas[win.sl], box, out=canvas[win.sl])
            hx, hy = anatomy.heart_center
            for lead in range(int(rng.integers(1, 3))):
                points = [(gx - 0.05, gy + 0.03), (m - 0.05, -0.55), (m - 0.1, -0.1)]
                xs, ys = bezier([*points, (hx - 0.05 + 0.12 * lead, hy + 0.1)], 80)
                polyline_in_frame(frame, canvas, xs, ys, 0.014, 0.95)
        elif device == "chest tube":
            side = a.get("chest_tube_side", 1)
            points = [(m + side * 1.1, 0.35), (m + side * 0.75, 0.3), (m + side * 0.55, -0.1)]
            xs, ys = bezier([*points, (m + side * 0.4, -0.45)], 60)
            polyline_in_frame(frame, canvas, xs, ys, 0.034, 0.45)
            polyline_in_frame(frame, canvas, xs, ys, 0.012, 1.0)
