"""The images the density evaluation scores against the archive, besides its phantoms.

Near the archive's distribution (``near:`` groups): the *same anatomy* under another acquisition
or rendering, each applied to the same source phantoms so the shifts are paired:

* grey-level changes a different detector or processing gives: gamma 0.5 (brighter), gamma 2
  (darker), contrast halved;
* quantum noise (Gaussian, σ = 0.08 of the grey range), blur (Gaussian, σ = 3 px at 320 px),
  low resolution (64 px, enlarged back), tight collimation (the outer band white, as unexposed
  film is);
* the generator's own nuisance ranges doubled (``PhantomConfig.nuisance_scale = 2``: pose,
  inspiration, exposure, contrast, noise, framing beyond what the archive holds);
* another projection: :func:`lateral_phantom`, a left-lateral chest drawn in the phantom's style
  (the phantom generator draws only AP/PA films). It is a lateral-*like* drawing: body, superimposed
  lungs, heart against the sternum, vertebral column behind, both hemidiaphragms, raised arms.

Display errors (``display:``): grey levels inverted (MONOCHROME1 shown as MONOCHROME2), upside
down, mirrored left-right, rotated 90°.

Far from it (``far:``): every decodable single-image file of pydicom-data and of pydicom's own test
files other than RG1 (a real chest film, reported apart), *deduplicated by image content* (the
18 files of pydicom-data are 9 images in several encodings: one is kept per image); natural
photographs (scikit-image's, scikit-learn's and matplotlib's bundled photographs, greyscale);
synthetic noise and texture images.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

#: near-distribution shifts of a rendered phantom (name -> function of the [0, 1] image)
_BLUR_SIGMA = 3.0
_NOISE_SIGMA = 0.08
_LOW_RESOLUTION = 64
_COLLIMATION = (0.14, 0.1)  # band width (rows, columns) as a share of the side
NEAR_IMAGE_SHIFTS = (
    "gamma 0.5 (brighter)",
    "gamma 2 (darker)",
    "contrast halved",
    "noise sigma 0.08",
    "blur sigma 3 px",
    "resolution 64 px",
    "tight collimation",
)
#: near shifts drawn by a generator, not applied to the source image
NEAR_RENDERED = ("nuisance ranges doubled", "lateral-like projection")
DISPLAY_ERRORS = (
    "grey levels inverted",
    "upside down",
    "mirrored left-right",
    "rotated 90 degrees",
)
#: pydicom-data files that are real chest films (their own group, not counted as OOD)
CHEST_FILES = ("RG1_UNCR.dcm", "RG1_UNCI.dcm", "RG1_J2KR.dcm", "RG1_J2KI.dcm")
#: two decoded files hold the same picture when their 32 x 32 thumbnails correlate above this
#: (the lossy JPEG 2000 and the lossless encodings of one CT slice correlate at 0.97)
SAME_IMAGE_CORRELATION = 0.95
#: scikit-image's bundled photographs (camera scenes; not charts, text or microscopy)
SKIMAGE_PHOTOS = (
    "astronaut.png", "brick.png", "camera.png", "chelsea.png", "coffee.png", "coins.png",
    "grass.png", "gravel.png", "hubble_deep_field.jpg", "moon.png", "motorcycle_left.png",
    "retina.jpg", "rocket.jpg",
)  # fmt: skip


def resize(image: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Bilinear resize of a float image to (rows, columns)."""
    from PIL import Image

    picture = Image.fromarray(np.asarray(image, dtype=np.float32), mode="F")
    return np.asarray(picture.resize((shape[1], shape[0]), Image.BILINEAR), dtype=np.float32)


def near_shift(image: np.ndarray, kind: str, rng: np.random.Generator) -> np.ndarray:
    """One of ``NEAR_IMAGE_SHIFTS`` applied to a [0, 1] image (``rng`` draws the noise)."""
    from scipy.ndimage import gaussian_filter

    x = np.asarray(image, dtype=np.float32)
    if kind == "gamma 0.5 (brighter)":
        out = x**0.5
    elif kind == "gamma 2 (darker)":
        out = x**2
    elif kind == "contrast halved":
        out = 0.25 + 0.5 * x
    elif kind == "noise sigma 0.08":
        out = x + rng.normal(0.0, _NOISE_SIGMA, x.shape)
    elif kind == "blur sigma 3 px":
        out = gaussian_filter(x, _BLUR_SIGMA)
    elif kind == "resolution 64 px":
        out = resize(resize(x, (_LOW_RESOLUTION, _LOW_RESOLUTION)), x.shape)
    elif kind == "tight collimation":
        rows, cols = x.shape
        band_r, band_c = int(_COLLIMATION[0] * rows), int(_COLLIMATION[1] * cols)
        mask = np.zeros_like(x)
        mask[band_r : rows - band_r, band_c : cols - band_c] = 1.0
        mask = gaussian_filter(mask, 1.5)  # a slightly soft shutter edge
        out = mask * x + (1.0 - mask) * 0.92
    else:
        raise ValueError(f"unknown near shift {kind!r}; one of {', '.join(NEAR_IMAGE_SHIFTS)}")
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def display_error(image: np.ndarray, kind: str) -> np.ndarray:
    """One of ``DISPLAY_ERRORS`` applied to a [0, 1] image."""
    x = np.asarray(image, dtype=np.float32)
    if kind == "grey levels inverted":
        return 1.0 - x
    if kind == "upside down":
        return np.ascontiguousarray(x[::-1])
    if kind == "mirrored left-right":
        return np.ascontiguousarray(x[:, ::-1])
    if kind == "rotated 90 degrees":
        return np.ascontiguousarray(np.rot90(x))
    raise ValueError(f"unknown display error {kind!r}; one of {', '.join(DISPLAY_ERRORS)}")


def _ellipsoid(u, v, cu, cv, au, av):
    """Path length (0..1) through an ellipsoid centred at (cu, cv) with semi-axes (au, av)."""
    r = ((u - cu) / au) ** 2 + ((v - cv) / av) ** 2
    return np.sqrt(np.clip(1.0 - r, 0.0, None))


def _soft_step(values, width):
    """0 below −width, 1 above +width, smooth between."""
    return np.clip(0.5 + values / (2 * width), 0.0, 1.0)


def lateral_phantom(seed: int, index: int, size: int = 320) -> np.ndarray:
    """A left-lateral chest radiograph in the phantom's style (module text), in [0, 1].

    Image columns run anterior (left) to posterior (right), rows apex to abdomen. Attenuation is
    the path length through soft-tissue, lung, heart and bone shapes; it is shown like the phantom
    generator's films: 1 − exp(−μA) with exposure and contrast drawn per image, lung mottle,
    quantum noise and an "L" marker.
    """
    from scipy.ndimage import gaussian_filter

    from chexretrieve.phantom.canvas import glyph
    from chexretrieve.phantom.sampling import stream

    rng = stream(int(seed), 97, int(index))  # 97: a purpose no phantom stream uses
    v, u = np.mgrid[0:size, 0:size].astype(np.float32) / size
    front, back = 0.14 + rng.uniform(-0.03, 0.03), 0.86 + rng.uniform(-0.03, 0.03)
    middle, half = (front + back) / 2, (back - front) / 2
    u = u - rng.uniform(-0.03, 0.03) * (v - 0.5)  # a slight lean
    body = _ellipsoid(u, v, middle, 0.6, half, 0.9)
    # lungs (both, superimposed): apex at the top, anterior border behind the sternum, posterior
    # border in front of the spine, domed hemidiaphragms, the posterior sulcus deepest
    spine_front = back - 0.2 + rng.uniform(-0.02, 0.02)
    dome = 0.64 + rng.uniform(-0.04, 0.04) - 0.1 * np.cos(np.clip((u - 0.5) * 3.2, -1.6, 1.6))
    dome = dome + 0.1 * _soft_step(u - spine_front + 0.12, 0.12)
    lung = _soft_step(v - 0.1 - 0.25 * ((u - 0.48) / 0.32) ** 2, 0.03)
    lung *= _soft_step(u - front - 0.05, 0.03) * _soft_step(spine_front - u, 0.02)
    lung *= _soft_step(dome - v, 0.012)
    second = _soft_step(dome + rng.uniform(0.01, 0.035) - v, 0.012)  # the other hemidiaphragm
    lung = 0.5 * lung + 0.5 * lung * second / np.maximum(_soft_step(dome - v, 0.012), 1e-6)
    lung = np.clip(lung, 0, 1)
    mottle = gaussian_filter(rng.standard_normal((size, size)), 2.5)
    mottle /= mottle.std() + 1e-9
    heart = _ellipsoid(u, v, front + 0.24 + rng.uniform(-0.02, 0.02), 0.56, 0.19, 0.17)
    hilum = _ellipsoid(u, v, 0.5, 0.42, 0.07, 0.09)
    aorta = _ellipsoid(u, v, 0.5, 0.27, 0.09, 0.06) - _ellipsoid(u, v, 0.5, 0.28, 0.06, 0.035)
    bone = np.zeros_like(u)
    for top in np.arange(0.02, 1.0, 0.072):  # vertebral bodies, disc spaces between
        bone += 0.2 * (
            _soft_step(v - top, 0.004)
            * _soft_step(top + 0.058 - v, 0.004)
            * _soft_step(u - spine_front, 0.004)
            * _soft_step(spine_front + 0.11 - u, 0.004)
        )
    bone += 0.1 * _soft_step(0.012 - np.abs(u - spine_front - 0.16), 0.004)  # posterior arch
    bone += 0.12 * _soft_step(0.01 - np.abs(u - front - 0.025), 0.004) * (v > 0.18) * (v < 0.62)
    for k in range(9):  # posterior ribs: faint arcs descending forwards
        arc = v - (0.14 + 0.075 * k) - 0.6 * (back - u) ** 2
        bone += 0.05 * _soft_step(0.008 - np.abs(arc), 0.004) * (u > 0.45)
    arms = _ellipsoid(u, v, middle + 0.05, 0.02, half * 0.9, 0.2)
    attenuation = (
        0.85 * body
        - 0.5 * lung * (1 + 0.03 * mottle)
        + 0.25 * heart * lung
        + 0.15 * hilum
        + 0.1 * aorta
        + bone
        + 0.35 * arms
    )
    attenuation = gaussian_filter(attenuation, 0.8)
    exposure, contrast = math.exp(rng.normal(0, 0.12)), math.exp(rng.normal(0, 0.12))
    image = (0.95 - np.exp(-1.6 * contrast * np.clip(attenuation, 0, None))) * 1.12 / exposure
    image = image * _soft_step(body - 0.02, 0.02)
    image += rng.normal(0, rng.uniform(0.004, 0.02), image.shape)
    image = np.clip(image, 0.0, 1.0).astype(np.float32)
    letter = glyph("L", max(1, size // 80))
    r0 = max(2, size // 20)
    block = image[r0 : r0 + letter.shape[0], r0 : r0 + letter.shape[1]]
    np.maximum(block, letter * 0.95, out=block)
    return image


def synthetic_images(count: int, size: int, seed: int) -> list[tuple[str, np.ndarray]]:
    """(kind, image) non-radiographs: noise, smoothed noise, 1/f textures, gratings, flat grey."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(seed)
    freq = np.sqrt(np.add.outer(np.fft.fftfreq(size) ** 2, np.fft.fftfreq(size) ** 2))
    freq[0, 0] = 1.0
    out = []
    for i in range(count):
        kind = i % 6
        if kind == 0:
            image, name = rng.random((size, size)), "uniform noise"
        elif kind == 1:
            image, name = 0.5 + 0.2 * rng.standard_normal((size, size)), "gaussian noise"
        elif kind == 2:
            blurred = gaussian_filter(rng.standard_normal((size, size)), sigma=rng.uniform(2, 12))
            image, name = 0.5 + blurred / (4 * blurred.std() + 1e-9), "smoothed noise"
        elif kind == 3:
            spectrum = rng.standard_normal((size, size)) + 1j * rng.standard_normal((size, size))
            field = np.real(np.fft.ifft2(spectrum / freq ** rng.uniform(1.0, 2.0)))
            image, name = 0.5 + field / (4 * field.std() + 1e-9), "1/f texture"
        elif kind == 4:
            y, x = np.mgrid[0:size, 0:size] / size
            angle, period = rng.uniform(0, np.pi), rng.uniform(0.03, 0.3)
            wave = np.sin(2 * np.pi * (x * np.cos(angle) + y * np.sin(angle)) / period)
            image, name = 0.5 + 0.4 * wave, "grating"
        else:
            image, name = np.full((size, size), rng.uniform(0.1, 0.9)), "flat grey"
        out.append((name, np.clip(image, 0, 1).astype(np.float32)))
    return out


def _dicom_folders() -> list[Path]:
    folders = []
    try:
        import data_store  # pydicom-data's package

        folders.append(Path(data_store.__file__).parent / "data")
    except ImportError:  # pragma: no cover - pydicom-data is a dev dependency
        pass
    from chexretrieve.dicom import pydicom_test_file

    try:  # pydicom's own test files: the folder of one it always ships
        folders.append(pydicom_test_file("CT_small.dcm").parent)
    except ValueError:  # pragma: no cover
        pass
    return folders


def dicom_sample_files() -> list[tuple[str, np.ndarray]]:
    """(file name (modality), pixels in [0, 1]) of every decodable single greyscale image of
    pydicom-data and pydicom's test files, sorted by name, before deduplication."""
    from chexretrieve.dicom import RejectedFile, read_radiograph
    from chexretrieve.dicom.config import ReadConfig

    config = ReadConfig(allowed_modalities=None)
    out, seen = [], set()
    for folder in _dicom_folders():
        for path in sorted(folder.glob("*.dcm")):
            if path.name in seen:
                continue
            try:
                radiograph = read_radiograph(path, config)
            except (RejectedFile, ValueError, OSError, RuntimeError):
                continue
            pixels = radiograph.pixels
            if pixels.ndim == 2 and min(pixels.shape) >= 16 and float(np.ptp(pixels)) > 0:
                seen.add(path.name)
                name = f"{path.name} ({radiograph.metadata.modality or 'no modality'})"
                out.append((name, np.asarray(pixels, dtype=np.float32)))
    return sorted(out)


def thumbnail(image: np.ndarray, side: int = 32) -> np.ndarray:
    """The image shrunk to side x side, zero mean and unit norm (for content comparison)."""
    small = resize(image, (side, side)).astype(np.float64).ravel()
    small -= small.mean()
    norm = np.linalg.norm(small)
    return small / norm if norm > 0 else small


def same_picture(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two decoded images hold the same picture: equal shapes and thumbnails correlating
    above ``SAME_IMAGE_CORRELATION`` (another encoding, lossy or not), or one a crop of the
    other along one axis (the best of 32 offsets)."""
    if a.shape == b.shape:
        return float(thumbnail(a) @ thumbnail(b)) > SAME_IMAGE_CORRELATION
    small, large = (a, b) if a.size < b.size else (b, a)
    for axis in (0, 1):
        other = 1 - axis
        if small.shape[other] != large.shape[other] or small.shape[axis] > large.shape[axis]:
            continue
        reference = thumbnail(small)
        room = large.shape[axis] - small.shape[axis]
        for start in np.unique(np.linspace(0, room, 33).astype(int)):
            crop = np.take(large, np.arange(start, start + small.shape[axis]), axis=axis)
            if float(reference @ thumbnail(crop)) > SAME_IMAGE_CORRELATION:
                return True
    return False


def distinct_images(named) -> list[tuple[str, np.ndarray, tuple[str, ...]]]:
    """Group (name, image) pairs holding the same picture (:func:`same_picture`): per group
    (its first name, that image, every name)."""
    groups: list[tuple[str, np.ndarray, list[str]]] = []
    for name, image in named:
        for group in groups:
            if same_picture(image, group[1]):
                group[2].append(name)
                break
        else:
            groups.append((name, image, [name]))
    return [(first, image, tuple(names)) for first, image, names in groups]


def _grey(path: Path, longest: int = 512) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as picture:
        grey = picture.convert("L")
        grey.thumbnail((longest, longest))
        return np.asarray(grey, dtype=np.float32) / 255.0


def photograph_files() -> list[Path]:
    """The bundled photographs found in this environment (scikit-image's, scikit-learn's,
    matplotlib's), sorted by name."""
    found = []
    try:
        import skimage.data as skimage_data

        folder = Path(skimage_data.__file__).parent
        found += [folder / n for n in SKIMAGE_PHOTOS if (folder / n).is_file()]
    except ImportError:  # pragma: no cover - scikit-image is a dev dependency
        pass
    import matplotlib
    import sklearn.datasets

    found += sorted((Path(sklearn.datasets.__file__).parent / "images").glob("*.jpg"))
    sample = Path(matplotlib.get_data_path()) / "sample_data"
    found += [sample / n for n in ("grace_hopper.jpg", "Minduka_Present_Blue_Pack.png")]
    return sorted((p for p in found if p.is_file()), key=lambda p: p.name)


def photographs() -> list[tuple[str, np.ndarray]]:
    """(file name, greyscale pixels in [0, 1], longest side 512) of :func:`photograph_files`."""
    return [(path.name, _grey(path)) for path in photograph_files()]
