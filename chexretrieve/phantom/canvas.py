"""Drawing primitives for the phantom renderer: the pixel grid in body coordinates, windows,
polyline and disc stamping, cached texture banks and the side-marker glyphs.

Body coordinates: x runs from -1 (image left = patient's right) to +1, y from -1 (top) to +1
(bottom); the torso of a normal-sized patient spans about |x| < 0.85.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import ndimage

_ZERO, _ONE = np.float32(0.0), np.float32(1.0)
# the clip ufunc itself: np.clip's Python wrapper costs more than the work on small blocks
_clip = getattr(getattr(np, "_core", None), "umath", np).clip if hasattr(np, "_core") else np.clip
#: the body-coordinate square the texture atlases cover
ATLAS_HALF_SPAN = 1.3


@dataclass
class Window:
    """A rectangular block of the frame: its slices and body coordinates."""

    rows: slice
    cols: slice
    X: np.ndarray
    Y: np.ndarray

    @property
    def sl(self) -> tuple[slice, slice]:
        return (self.rows, self.cols)


class Frame:
    """Maps pixels to body coordinates through zoom, in-plane rotation and offset (the crop)."""

    def __init__(self, size: int, zoom: float, angle: float, offset: tuple[float, float]):
        self.size = size
        self.zoom = float(zoom)
        self.cos, self.sin = float(np.cos(angle)), float(np.sin(angle))
        self.ox, self.oy = float(offset[0]), float(offset[1])
        self._xy: tuple[np.ndarray, np.ndarray] | None = None

    def _coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        if self._xy is None:
            size = self.size
            u = ((np.arange(size, dtype=np.float32) + 0.5) * (2.0 / size) - 1.0).astype(np.float32)
            zc, zs = np.float32(self.zoom * self.cos), np.float32(self.zoom * self.sin)
            # X = ox + z(cos u - sin v), Y = oy + z(sin u + cos v); v runs down the rows
            x = (self.ox + zc * u)[None, :] - (zs * u)[:, None]
            y = (self.oy + zc * u)[:, None] + (zs * u)[None, :]
            self._xy = (x, y)
        return self._xy

    @property
    def X(self) -> np.ndarray:
        """Body x of every pixel (computed on first use)."""
        return self._coordinates()[0]

    @property
    def Y(self) -> np.ndarray:
        """Body y of every pixel (computed on first use)."""
        return self._coordinates()[1]

    def to_pixel(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Body coordinates -> (row, col) float pixel coordinates."""
        dx, dy = (np.asarray(x) - self.ox) / self.zoom, (np.asarray(y) - self.oy) / self.zoom
        u = self.cos * dx + self.sin * dy
        v = -self.sin * dx + self.cos * dy
        scale = self.size / 2.0
        return (v + 1.0) * scale - 0.5, (u + 1.0) * scale - 0.5

    def pixels_per_unit(self) -> float:
        return self.size / (2.0 * self.zoom)

    def window(self, x0: float, x1: float, y0: float, y1: float) -> Window | None:
        """The pixel block covering the body-coordinate box, or None when it is off the image."""
        rows, cols = [], []
        scale, zoom = self.size / 2.0, self.zoom
        for x, y in ((x0, y0), (x1, y0), (x0, y1), (x1, y1)):
            dx, dy = (x - self.ox) / zoom, (y - self.oy) / zoom
            cols.append((self.cos * dx + self.sin * dy + 1.0) * scale - 0.5)
            rows.append((-self.sin * dx + self.cos * dy + 1.0) * scale - 0.5)
        r0, r1 = max(math.floor(min(rows)), 0), min(math.ceil(max(rows)) + 1, self.size)
        c0, c1 = max(math.floor(min(cols)), 0), min(math.ceil(max(cols)) + 1, self.size)
        if r0 >= r1 or c0 >= c1:
            return None
        rs, cs = slice(r0, r1), slice(c0, c1)
        return Window(rs, cs, self.X[rs, cs], self.Y[rs, cs])


def upsample2(low: np.ndarray) -> np.ndarray:
    """Bilinear 2x upsampling that keeps pixel centres aligned (a Frame of half the size maps
    onto the full one exactly): output pixel 2j and 2j+1 lie a quarter pixel either side of j."""
    padded = np.concatenate([low[:1], low, low[-1:]], axis=0)
    rows = np.empty((2 * low.shape[0], low.shape[1]), low.dtype)
    rows[0::2] = 0.75 * low + 0.25 * padded[:-2]
    rows[1::2] = 0.75 * low + 0.25 * padded[2:]
    padded = np.concatenate([rows[:, :1], rows, rows[:, -1:]], axis=1)
    out = np.empty((rows.shape[0], 2 * low.shape[1]), low.dtype)
    out[:, 0::2] = 0.75 * rows + 0.25 * padded[:, :-2]
    out[:, 1::2] = 0.75 * rows + 0.25 * padded[:, 2:]
    return out


def ramp(value: np.ndarray, width: float) -> np.ndarray:
    """0 where value <= 0, rising linearly to 1 at value = width (a soft mask edge)."""
    out = value * np.float32(1.0 / width)
    return _clip(out, _ZERO, _ONE, out=out)


def resample_polyline(
    rows: np.ndarray, cols: np.ndarray, width: float | np.ndarray, spacing: float = 0.5
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points every `spacing` pixels along a polyline, with the width interpolated."""
    rows, cols = np.asarray(rows, dtype=np.float64), np.asarray(cols, dtype=np.float64)
    step = np.hypot(np.diff(rows), np.diff(cols))
    arc = np.concatenate([[0.0], np.cumsum(step)])
    count = max(int(arc[-1] / spacing) + 2, 2)
    t = np.linspace(0.0, arc[-1], count)
    widths = np.broadcast_to(np.asarray(width, dtype=np.float64), rows.shape)
    return np.interp(t, arc, rows), np.interp(t, arc, cols), np.interp(t, arc, widths)


def stamp_points(
    canvas: np.ndarray, r: np.ndarray, c: np.ndarray, width: np.ndarray, value: np.ndarray | float
) -> None:
    """Max-blend anti-aliased discs of diameter `width` (pixels) centred on the points."""
    half = np.asarray(width, dtype=np.float64) / 2.0
    reach = int(np.ceil(half.max() + 1.0))
    offs = np.arange(-reach, reach + 1)
    orow, ocol = np.meshgrid(offs, offs, indexing="ij")
    pr = np.floor(r)[:, None] + orow.ravel()[None, :]
    pc = np.floor(c)[:, None] + ocol.ravel()[None, :]
    dist = np.hypot(pr - r[:, None], pc - c[:, None])
    value = np.broadcast_to(np.asarray(value, dtype=np.float64), r.shape)[:, None]
    weight = np.clip(half[:, None] + 0.5 - dist, 0.0, 1.0) * value
    h, w = canvas.shape
    ok = (weight > 0) & (pr >= 0) & (pr < h) & (pc >= 0) & (pc < w)
    flat = (pr[ok] * w + pc[ok]).astype(np.int64)
    np.maximum.at(canvas.reshape(-1), flat, weight[ok].astype(canvas.dtype))


def stamp_polyline(
    canvas: np.ndarray,
    rows: np.ndarray,
    cols: np.ndarray,
    width: float | np.ndarray,
    value: float = 1.0,
) -> None:
    """Max-blend an anti-aliased line of `width` pixels through the points (pixel coordinates)."""
    if np.asarray(rows).size < 2:
        return
    r, c, w = resample_polyline(rows, cols, width)
    stamp_points(canvas, r, c, w, value)


def polyline_in_frame(
    frame: Frame, canvas: np.ndarray, x: np.ndarray, y: np.ndarray, width: float, value: float
) -> None:
    """Stamp a polyline given in body coordinates; `width` is in body units."""
    rows, cols = frame.to_pixel(x, y)
    stamp_polyline(canvas, rows, cols, max(width * frame.pixels_per_unit(), 0.8), value)


def bezier(points: list[tuple[float, float]], count: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Points along the Bezier curve with the given control points (body coordinates)."""
    p = np.asarray(points, dtype=np.float64)
    degree = len(p) - 1
    t = np.linspace(0.0, 1.0, count)[:, None]
    i = np.arange(degree + 1)[None, :]
    binom = np.array([math.comb(degree, k) for k in range(degree + 1)])[None, :]
    basis = binom * t**i * (1.0 - t) ** (degree - i)
    curve = basis @ p
    return curve[:, 0], curve[:, 1]


@lru_cache(maxsize=4)
def noise_bank(size: int) -> np.ndarray:
    """Four (size + 32)-square frames of unit white noise, slightly blurred (detector blur)."""
    rng = np.random.default_rng(20240611)
    frames = rng.standard_normal((4, size + 32, size + 32)).astype(np.float32)
    for k in range(4):
        frames[k] = ndimage.gaussian_filter(frames[k], 0.6)
    frames /= frames.std()
    frames.setflags(write=False)
    return frames


def smooth_field(shape: tuple[int, int], scale: float, rng: np.random.Generator) -> np.ndarray:
    """Zero-mean, unit-variance Gaussian random field with correlation length `scale` pixels."""
    white = rng.standard_normal(shape)
    fy = np.fft.fftfreq(shape[0])[:, None]
    fx = np.fft.rfftfreq(shape[1])[None, :]
    spectrum = np.fft.rfft2(white) * np.exp(-((fx**2 + fy**2) * (np.pi * scale) ** 2))
    field = np.fft.irfft2(spectrum, s=shape)
    field -= field.mean()
    return (field / (field.std() + 1e-12)).astype(np.float32)


@lru_cache(maxsize=4)
def mottle_bank(size: int) -> np.ndarray:
    """Four frames of smooth noise (about 4 % of the image) for lung parenchyma and tissue."""
    rng = np.random.default_rng(7351)
    frames = np.stack([smooth_field((size + 32, size + 32), size / 70.0, rng) for _ in range(4)])
    frames.setflags(write=False)
    return frames


def bank_view(bank: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """A random size x size view (frame, offset, flip) into a bank; no copy for the offset."""
    k, dr, dc = rng.integers(0, bank.shape[0]), rng.integers(0, 32), rng.integers(0, 32)
    view = bank[k, dr : dr + size, dc : dc + size]
    return view[::-1] if rng.random() < 0.5 else view


def _grow_tree(
    rng: np.random.Generator,
    x: float,
    y: float,
    angle: float,
    length: float,
    width: float,
    depth: int,
    out: list[tuple[np.ndarray, np.ndarray, float]],
) -> None:
    if depth == 0 or width < 0.002:
        return
    bend = rng.normal(0.0, 0.35)
    t = np.linspace(0.0, 1.0, 12)
    a = angle + bend * t + 0.08 * np.sin(t * 6 + rng.uniform(0, 6))
    xs = x + np.cumsum(np.cos(a)) * length / 12
    ys = y + np.cumsum(np.sin(a)) * length / 12
    out.append((np.concatenate([[x], xs]), np.concatenate([[y], ys]), width))
    for turn in (-1.0, 1.0):
        child = a[-1] + turn * rng.uniform(0.2, 0.55)
        shorter = length * rng.uniform(0.7, 0.9)
        _grow_tree(rng, xs[-1], ys[-1], child, shorter, width * 0.72, depth - 1, out)


@lru_cache(maxsize=4)
def vessel_atlas(size: int) -> np.ndarray:
    """Four atlases of pulmonary vessel trees radiating from both hila (body coordinates,
    ATLAS_HALF_SPAN square, size x size pixels, values in [0, 1])."""
    rng = np.random.default_rng(99173)
    atlases = np.zeros((4, size, size), dtype=np.float32)
    scale = size / (2 * ATLAS_HALF_SPAN)
    for k in range(4):
        segments: list[tuple[np.ndarray, np.ndarray, float]] = []
        for side in (-1.0, 1.0):
            hx, hy = side * 0.2, -0.05
            for base in np.linspace(-1.35, 1.25, 9):
                # directions fan from up (-pi/2) over lateral to down (+pi/2), mirrored per side
                angle = base + rng.normal(0, 0.1)
                angle = angle if side > 0 else np.pi - angle
                _grow_tree(rng, hx, hy, angle, rng.uniform(0.13, 0.17), 0.018, 6, segments)
        parts = []
        for xs, ys, width in segments:
            rows, cols = (ys + ATLAS_HALF_SPAN) * scale - 0.5, (xs + ATLAS_HALF_SPAN) * scale - 0.5
            r, c, w = resample_polyline(rows, cols, max(width * scale, 0.7))
            parts.append((r, c, w, np.full(r.shape, min(1.0, 0.25 + width * 45))))
        r, c, w, v = (np.concatenate(x) for x in zip(*parts, strict=True))
        stamp_points(atlases[k], r, c, w, v)
        atlases[k] = ndimage.gaussian_filter(atlases[k], 0.5)
    atlases.setflags(write=False)
    return atlases


def atlas_size(size: int) -> int:
    """Resolution of the vessel atlas used for a drawing resolution: one shared 256-pixel atlas
    up to 256 pixels (built once per process), 512 above."""
    return 256 if size <= 256 else 512


def atlas_index(frame: Frame, size: int) -> np.ndarray:
    """Flat index into a size x size atlas for every pixel of the frame (nearest neighbour)."""
    scale = np.float32(size / (2 * ATLAS_HALF_SPAN))
    col = np.clip(((frame.X + ATLAS_HALF_SPAN) * scale).astype(np.int32), 0, size - 1)
    row = np.clip(((frame.Y + ATLAS_HALF_SPAN) * scale).astype(np.int32), 0, size - 1)
    return row * size + col


_GLYPHS = {
    "L": ["10000", "10000", "10000", "10000", "10000", "10000", "11111"],
    "R": ["11110", "10001", "10001", "11110", "10100", "10010", "10001"],
}


def glyph(letter: str, scale: int) -> np.ndarray:
    """The 5 x 7 bitmap of 'L' or 'R', enlarged `scale` times, as float32 0/1."""
    bits = np.array([[c == "1" for c in row] for row in _GLYPHS[letter]], dtype=np.float32)
    return np.kron(bits, np.ones((scale, scale), dtype=np.float32))
