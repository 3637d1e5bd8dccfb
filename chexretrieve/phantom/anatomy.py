"""Normal chest anatomy of a phantom: soft tissue, lungs, heart, mediastinum, bones, diaphragm.

Everything is drawn into `Layers` (float32 fields over the frame) that `compose` turns into the
radiograph. Findings (chexretrieve.phantom.signs) change the `Anatomy` before drawing (heart size,
mediastinal width, hemidiaphragm height) and draw into the layers afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from chexretrieve.phantom.canvas import (
    Frame,
    Window,
    atlas_index,
    atlas_size,
    ramp,
    vessel_atlas,
)


@dataclass
class Anatomy:
    """Geometry of one phantom in body coordinates (see chexretrieve.phantom.canvas)."""

    mid_x: float = 0.0  # mediastinum / trachea centre
    spine_x: float = 0.0  # spinous processes (patient rotation moves them off mid_x)
    body_half_width: float = 0.9  # torso half width at mid chest
    soft_density: float = 0.78  # soft-tissue attenuation at the body centre
    lung_scale: float = 1.0  # thorax width factor
    lung_top: float = -0.64  # lung apex height
    dome: tuple[float, float] = (0.42, 0.46)  # hemidiaphragm dome heights (patient right, left)
    heart_center: tuple[float, float] = (0.12, 0.3)
    heart_axes: tuple[float, float] = (0.4, 0.27)  # semi-axes along / across the long axis
    heart_tilt: float = 0.68  # long axis angle (radians, down to the patient's left)
    mediastinum_widening: float = 1.0  # 1 = normal; > 1 widens the upper mediastinum
    knob: float = 0.05  # aortic knob bulge
    rib_spacing: float = 0.118  # vertical spacing of the posterior ribs at the apex
    rib_phase: float = 0.0  # shifts the rib pattern vertically
    clavicle_lift: float = 0.0  # AP views project the clavicles higher
    scapula_overlap: float = 0.0  # AP views project the scapulae over the lungs
    breast: float = 0.0  # breast shadow density (0 = none)
    gastric_bubble: float = 0.6  # density of the stomach gas bubble under the left dome
    vessel_atlas: int = 0  # which pulmonary vessel pattern
    vessel_density: float = 0.13
    extra: dict = field(default_factory=dict)

    def side_x(self, side: int, xm: float) -> float:
        """Body x of the mirrored lateral coordinate xm on a side (-1 patient right, +1 left)."""
        return self.mid_x + side * xm


class Layers:
    """The fields a phantom is composed from (float32).

    Anatomy and most signs live on `lo` (half resolution for even sizes >= 192, else the output
    resolution); only thin lines and devices are drawn on `hi` (the output resolution).
    `compose` upsamples the `lo` attenuation once.
    """

    def __init__(self, hi: Frame, lo: Frame):
        self.hi, self.lo = hi, lo
        small, big = (lo.size, lo.size), (hi.size, hi.size)
        self.soft = np.zeros(small, np.float32)  # soft-tissue attenuation
        self.lung = np.zeros(small, np.float32)  # aerated-lung mask (0..1)
        self.fill = np.zeros(small, np.float32)  # airspace filling (0 = air, 1 = fluid/tissue)
        self.markings = np.zeros(small, np.float32)  # where lung markings show (0 = pneumothorax)
        self.lucent = np.zeros(small, np.float32)  # air outside the lung (trachea, pneumothorax)
        self.dense = np.zeros(small, np.float32)  # bone, solid lesions, calcification (adds)
        self.vessels = np.zeros(small, np.float32)  # pulmonary vessel pattern (0..1)
        self._big = big
        self._lines: np.ndarray | None = None
        self._metal: np.ndarray | None = None

    @property
    def lines(self) -> np.ndarray:
        """Fine bright lines (septal lines) at output resolution; allocated on first use."""
        if self._lines is None:
            self._lines = np.zeros(self._big, np.float32)
        return self._lines

    @property
    def metal(self) -> np.ndarray:
        """Devices (pushed towards white) at output resolution; allocated on first use."""
        if self._metal is None:
            self._metal = np.zeros(self._big, np.float32)
        return self._metal

    @property
    def has_lines(self) -> bool:
        return self._lines is not None

    @property
    def has_metal(self) -> bool:
        return self._metal is not None


def lung_level(anatomy: Anatomy, side: int, X: np.ndarray, Y: np.ndarray, shrink: float = 1.0):
    """Level function of one lung: < 0 inside, 0 on the border, in units of about the lung size.

    `shrink` < 1 gives the same lung scaled towards the hilum (a collapsed lung)."""
    s = anatomy.lung_scale
    xm = (X - anatomy.mid_x) * np.float32(side)
    hx, hy = 0.2 * s, -0.05
    if shrink != 1.0:
        xm = hx + (xm - hx) * np.float32(1.0 / shrink)
        Y = hy + (Y - hy) * np.float32(1.0 / shrink)
    cx, rx = 0.45 * s, 0.39 * s
    dome = anatomy.dome[0 if side < 0 else 1]
    cy = 0.5 * (anatomy.lung_top + dome) + 0.08
    ry_up, ry_down = cy - anatomy.lung_top, max(dome + 0.12 - cy, 0.2)
    dy = Y - np.float32(cy)
    upper = dy < 0
    q = dy * dy
    q *= np.where(upper, np.float32(1.0 / ry_up**2), np.float32(1.0 / ry_down**2))
    q = np.where(upper, q, q * q)
    dx = (xm - np.float32(cx)) * np.float32(1.0 / rx)
    q += dx * dx
    q -= 1.0
    t = xm - np.float32(0.4 * s)
    below = (Y - np.float32(dome) - 0.75 * t * t) * np.float32(4.0)
    return np.maximum(q, below, out=q)


def heart_mask(anatomy: Anatomy, X: np.ndarray, Y: np.ndarray, edge: float = 0.06) -> np.ndarray:
    cx, cy = anatomy.heart_center
    a, b = anatomy.heart_axes
    c, s = np.cos(anatomy.heart_tilt), np.sin(anatomy.heart_tilt)
    dx, dy = X - np.float32(cx), Y - np.float32(cy)
    u = (np.float32(c / a) * dx + np.float32(s / a) * dy) ** 2
    u += (np.float32(-s / b) * dx + np.float32(c / b) * dy) ** 2
    return ramp(1.0 - u, edge)


def mediastinum_mask(anatomy: Anatomy, win: Window) -> np.ndarray:
    X, Y = win.X, win.Y
    bump = ramp(1.0 - ((Y + 0.36) * (1 / 0.09)) ** 2, 1.0)
    profile = ramp(1.0 - ((Y + 0.3) * (1 / 0.5)) ** 2, 0.4)
    widen = 1.0 + (anatomy.mediastinum_widening - 1.0) * profile
    right = anatomy.mid_x - (0.095 + 0.02 * ramp(Y + 0.2, 1.0)) * widen
    left = anatomy.mid_x + (0.1 + anatomy.knob * bump) * widen
    return ramp(X - right, 0.02) * ramp(left - X, 0.02) * ramp(0.45 - Y, 0.05)


def hemithorax_window(frame: Frame, anatomy: Anatomy, side: int, y0=-0.8, y1=0.95):
    """The frame block covering one hemithorax (lung plus chest wall) of a side."""
    x_lo, x_hi = anatomy.side_x(side, -0.05), anatomy.side_x(side, 0.95 * anatomy.lung_scale)
    return frame.window(min(x_lo, x_hi), max(x_lo, x_hi), y0, y1)


def draw_anatomy(anatomy: Anatomy, layers: Layers) -> None:
    """Draw the normal anatomy into the layers."""
    lo, a = layers.lo, anatomy
    X, Y = lo.X, lo.Y
    # torso: neck, sloping shoulders, chest wall thinning towards the edges
    rel = np.abs(X - np.float32(a.mid_x))
    width = a.body_half_width * (1.06 - 0.08 * ramp(Y + 0.4, 1.2))
    shoulder = -1.0 + 0.24 * ramp(rel - 0.27, 0.68)
    body = ramp(width - rel, 0.03) * ramp(Y - shoulder, 0.03)
    frac = rel / width
    thickness = np.sqrt(ramp(1.0 - frac * frac, 1.0))
    layers.soft[:] = body * (0.5 + 0.5 * thickness) * np.float32(a.soft_density)
    for side in (-1, 1):
        # humeral heads at the shoulders
        hx = a.side_x(side, a.body_half_width * 1.02)
        win = lo.window(hx - 0.14, hx + 0.14, -0.95, -0.55)
        if win is not None:
            r2 = (win.X - hx) ** 2 + (win.Y + 0.74) ** 2
            layers.dense[win.sl] += ramp(0.012 - r2, 0.004) * (0.08 + 0.1 * ramp(r2 - 0.009, 0.003))
    # lungs (each in its own block)
    for side in (-1, 1):
        win = hemithorax_window(lo, a, side, a.lung_top - 0.05, max(a.dome) + 0.25)
        if win is None:
            continue
        level = lung_level(a, side, win.X, win.Y)
        level *= -1.0
        lung = ramp(level, 0.05) * (0.6 + 0.4 * ramp(level, 0.45))
        np.maximum(layers.lung[win.sl], lung, out=layers.lung[win.sl])
    hx, hy = a.heart_center
    reach = max(a.heart_axes) + 0.05
    win = lo.window(hx - reach, hx + reach, hy - reach, hy + reach)
    if win is not None:
        heart = heart_mask(a, win.X, win.Y)
        layers.lung[win.sl] *= 1.0 - 0.85 * heart
        layers.soft[win.sl] += heart * 0.03
    med_win = lo.window(a.mid_x - 0.5, a.mid_x + 0.5, -1.3, 0.6)
    if med_win is not None:
        layers.lung[med_win.sl] *= 1.0 - mediastinum_mask(a, med_win)
    layers.markings[:] = layers.lung
    _draw_trachea(lo, a, layers)
    _draw_spine(lo, a, layers)
    _draw_ribs(lo, a, layers)
    _draw_clavicles(lo, a, layers)
    if a.breast > 0:
        for side in (-1, 1):
            win = lo.window(a.side_x(side, 0.1), a.side_x(side, 1.0), 0.05, 1.1)
            if win is not None:
                xm = side * (win.X - a.mid_x)
                e = ((xm - 0.52) * (1 / 0.42)) ** 2 + ((win.Y - 0.55) * (1 / 0.3)) ** 2
                layers.soft[win.sl] += ramp(1.0 - e, 0.25) * a.breast
    if a.gastric_bubble > 0:
        win = lo.window(a.side_x(1, 0.1), a.side_x(1, 0.7), a.dome[1], a.dome[1] + 0.3)
        if win is not None:
            xm = win.X - a.mid_x
            e = ((xm - 0.38) / 0.11) ** 2 + ((win.Y - a.dome[1] - 0.13) / 0.06) ** 2
            layers.soft[win.sl] -= ramp(1.0 - e, 0.3) * 0.25 * a.gastric_bubble
    size = atlas_size(lo.size)
    index = atlas_index(lo, size)
    layers.vessels[:] = np.take(vessel_atlas(size)[a.vessel_atlas].reshape(-1), index)


def _draw_trachea(frame: Frame, a: Anatomy, layers: Layers) -> None:
    """Trachea and main bronchi (air, on the smooth frame)."""
    win = frame.window(a.mid_x - 0.3, a.mid_x + 0.3, -1.3, 0.0)
    if win is None:
        return
    rel = win.X - a.mid_x
    trachea = ramp(0.035 - np.abs(rel), 0.012) * ramp(-0.3 - win.Y, 0.03)
    for side in (-1, 1):
        # main bronchi: from the carina down and out
        t = np.clip((win.Y + 0.3) / 0.18, 0.0, 1.0)
        centre = side * (0.02 + 0.12 * t**0.9)
        bronchus = ramp(0.022 - np.abs(rel - centre), 0.01) * ramp(win.Y + 0.32, 0.02)
        bronchus *= ramp(-0.1 - win.Y, 0.03)
        trachea = np.maximum(trachea, bronchus)
    layers.lucent[win.sl] += trachea * 0.12


def _draw_spine(frame: Frame, a: Anatomy, layers: Layers) -> None:
    win = frame.window(a.spine_x - 0.12, a.spine_x + 0.12, -1.4, 1.4)
    if win is None:
        return
    rel = np.abs(win.X - a.spine_x)
    column = ramp(0.075 - rel, 0.02)
    phase = (win.Y + 1.2) * (1.0 / 0.095)
    frac = phase - np.floor(phase)
    body = ramp(frac, 0.12) * ramp(0.82 - frac, 0.12)
    pedicle = ramp(0.0009 - ((rel - 0.05) ** 2 + ((frac - 0.35) * 0.095) ** 2), 0.0004)
    layers.dense[win.sl] += column * (0.05 + 0.035 * body) + pedicle * 0.04


def _rib_tables() -> tuple[np.ndarray, np.ndarray]:
    """Density along the rib phase for all posterior ribs (a band with brighter cortex per
    period) and for the anterior ribs; zero outside the drawn ribs."""
    f = (np.arange(RIB_COUNT * RIB_TABLE) + 0.5) / RIB_TABLE % 1.0
    band = np.clip(f / 0.06, 0, 1) * np.clip((RIB_WIDTH - f) / 0.06, 0, 1)
    posterior = band * (0.8 + 0.4 * np.abs(f * (2 / RIB_WIDTH) - 1.0))
    posterior[-1] = 0.0
    f2 = (np.arange(ANTERIOR_COUNT * RIB_TABLE) + 0.5) / RIB_TABLE % 1.0
    anterior = np.clip(f2 / 0.1, 0, 1) * np.clip((0.4 - f2) / 0.1, 0, 1)
    anterior[-1] = 0.0
    return posterior.astype(np.float32), anterior.astype(np.float32)


#: the rib period grows downwards: phase = (u - RIB_CHIRP u^2) / spacing (monotonic for u < 4)
RIB_CHIRP = 0.12
#: curvature of the posterior ribs (they arch up from the spine and fall towards the wall)
RIB_ARCH = 0.72
#: fraction of a rib period the rib itself occupies
RIB_WIDTH = 0.45
#: samples per rib period in the rib tables
RIB_TABLE = 256
#: how many posterior / anterior ribs are drawn
RIB_COUNT, ANTERIOR_COUNT = 11, 6
_POSTERIOR, _ANTERIOR = _rib_tables()


def rib_phase(a: Anatomy, xm: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Continuous rib number at each point: rib k occupies phases [k, k + RIB_WIDTH)."""
    u = Y - xm * (RIB_ARCH * xm - 0.24) - np.float32(a.lung_top - 0.05 + a.rib_phase)
    np.maximum(u, np.float32(-0.2), out=u)
    return u * (np.float32(1.0 / a.rib_spacing) - np.float32(RIB_CHIRP / a.rib_spacing) * u)


def _draw_ribs(frame: Frame, a: Anatomy, layers: Layers) -> None:
    fractures = a.extra.get("rib_fractures", [])
    s = a.lung_scale
    for side in (-1, 1):
        x_lo, x_hi = a.side_x(side, 0.0), a.side_x(side, 0.95 * s)
        y_end = a.dome[0 if side < 0 else 1] + 0.12
        win = frame.window(min(x_lo, x_hi), max(x_lo, x_hi), a.lung_top - 0.12, y_end)
        if win is None:
            continue
        xm = (win.X - np.float32(a.spine_x)) * np.float32(side)
        phase = rib_phase(a, xm, win.Y)
        gaps = []
        for fx, rib, shift, rib_side in fractures:
            if rib_side != side:
                continue
            # the fragment lateral to the break is displaced (tapering back over 0.22 units);
            # only rib `rib` and its interspaces move, so the neighbours stay whole
            along = xm - fx
            on_rib = (phase >= rib - 0.5) & (phase < rib + 0.9)
            gaps.append(ramp(shift * 0.1 - np.abs(along), 0.008) * on_rib)
            phase += (min(shift, 0.48) * on_rib) * ramp(0.22 - along, 0.22) * (along > 0)
        phase *= np.float32(RIB_TABLE)
        index = np.clip(phase, 0, RIB_COUNT * RIB_TABLE - 1, out=phase).astype(np.int32)
        posterior = _POSTERIOR[index]
        for gap in gaps:
            posterior *= 1.0 - 0.9 * gap
        posterior *= ramp(0.9 * s - xm, 0.04)
        posterior *= ramp(np.float32(y_end) - win.Y, 0.25)
        posterior *= np.float32(0.085)
        layers.dense[win.sl] += posterior
        # anterior ribs: fainter, sloping down towards the sternum, lateral to the cartilage
        x_lo2 = a.side_x(side, 0.25)
        win2 = frame.window(min(x_lo2, x_hi), max(x_lo2, x_hi), a.lung_top - 0.12, y_end - 0.25)
        if win2 is None:
            continue
        xm2 = (win2.X - np.float32(a.spine_x)) * np.float32(side)
        phase2 = win2.Y + 0.38 * xm2
        phase2 -= np.float32(a.lung_top + 0.12 + a.rib_phase)
        phase2 *= np.float32(RIB_TABLE / (a.rib_spacing * 1.25))
        index2 = np.clip(phase2, 0, ANTERIOR_COUNT * RIB_TABLE - 1, out=phase2).astype(np.int32)
        anterior = _ANTERIOR[index2]
        anterior *= ramp(xm2 - 0.3, 0.1) * ramp(0.9 * s - xm2, 0.04)
        anterior *= np.float32(0.03)
        layers.dense[win2.sl] += anterior


def _draw_clavicles(frame: Frame, a: Anatomy, layers: Layers) -> None:
    for side in (-1, 1):
        x_lo, x_hi = a.side_x(side, 0.0), a.side_x(side, 0.75)
        win = frame.window(min(x_lo, x_hi), max(x_lo, x_hi), -1.0, -0.4)
        if win is None:
            continue
        xm = side * (win.X - a.spine_x)
        centre = -0.64 - a.clavicle_lift - 0.2 * xm + 0.12 * xm * xm * (1 - a.clavicle_lift * 4)
        dist = np.abs(win.Y - centre)
        clav = ramp(0.032 - dist, 0.012) * ramp(xm - 0.06, 0.03) * ramp(0.68 - xm, 0.05)
        layers.dense[win.sl] += clav * (0.13 + 0.05 * ramp(dist - 0.015, 0.01))
        if a.scapula_overlap > 0:
            edge = 0.62 + 0.25 * (win.Y + 0.6)
            scap = ramp(xm - edge, 0.03) * ramp(-0.05 - win.Y, 0.15) * ramp(win.Y + 0.75, 0.1)
            layers.dense[win.sl] += scap * 0.05 * a.scapula_overlap
