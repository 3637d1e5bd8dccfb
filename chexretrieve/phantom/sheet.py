"""The phantom contact sheet: a normal case and one example of every finding, labelled."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chexretrieve.findings import FINDINGS
from chexretrieve.phantom.config import PhantomConfig
from chexretrieve.phantom.generator import PhantomCase, describe_case, generate_case
from chexretrieve.phantom.sampling import OPACITY_CAUSES

#: what each tile shows (the caption under the finding name)
SIGNS = {
    "Enlarged Cardiomediastinum": "widened mediastinum",
    "Cardiomegaly": "enlarged heart silhouette",
    "Lung Opacity": "ill-defined opacity",
    "Lung Lesion": "nodules or a mass",
    "Edema": "perihilar haze, septal lines",
    "Consolidation": "dense opacity, air bronchograms",
    "Pneumonia": "patchy airspace opacities",
    "Atelectasis": "plate-like opacity, volume loss",
    "Pneumothorax": "pleural line, no markings",
    "Pleural Effusion": "blunted angle, meniscus",
    "Pleural Other": "pleural thickening / plaques",
    "Fracture": "rib discontinuity",
    "Support Devices": "tubes, lines, pacemaker",
}


def isolated_case(seed: int, finding: str | None, config: PhantomConfig, start: int = 0):
    """The first case from `start` showing only `finding` (None: a normal case) at a clearly
    visible severity, on a typical PA film with little noise (devices: any view)."""
    for index in range(start, start + 500):
        overrides = {name: False for name in FINDINGS}
        if finding is not None:
            overrides[finding] = True
            if finding in OPACITY_CAUSES:
                overrides.pop("Lung Opacity")
        # screen on the description (cheap); draw only the chosen case
        case = describe_case(seed, index, config, overrides=overrides)
        attrs = case.attributes.get(finding or "", {})
        clear = attrs.get("severity", 1.0) >= (0.75 if finding == "Fracture" else 0.6)
        if finding == "Fracture":
            clear = clear and attrs["count"] >= 2
        typical = case.nuisance["view"] == "PA" and case.nuisance["noise"] < 0.012
        if (finding is None or clear) and (typical or finding == "Support Devices"):
            return generate_case(seed, index, config, overrides=overrides)
    raise RuntimeError(f"no clear example of {finding} in 500 cases")  # pragma: no cover


def contact_sheet(path: Path, seed: int = 0, config: PhantomConfig | None = None) -> Path:
    """Write the labelled 2 x 7 contact sheet PNG; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = config or PhantomConfig(size=256)
    tiles: list[tuple[str, str, PhantomCase]] = [
        ("Normal", "no finding", isolated_case(seed, None, config))
    ]
    for name in FINDINGS:
        tiles.append((name, SIGNS[name], isolated_case(seed, name, config)))
    fig, axes = plt.subplots(2, 7, figsize=(17.5, 6.8), facecolor="black")
    for ax, (title, caption, case) in zip(axes.ravel(), tiles, strict=True):
        ax.imshow(case.image, cmap="gray", vmin=0.0, vmax=1.0, interpolation="lanczos")
        ax.set_axis_off()
        ax.set_title(f"{title}\n{caption}", color="white", fontsize=9.5)
    fig.suptitle(
        "chexretrieve phantom world - SYNTHETIC images, not patients "
        f"(seed {seed}, {config.size} px)",
        color="white",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95), h_pad=2.2)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80, facecolor="black")
    plt.close(fig)
    return path


def sheet_array(seed: int = 0, config: PhantomConfig | None = None) -> np.ndarray:
    """The 14 tiles side by side (for tests and quick looks)."""
    config = config or PhantomConfig(size=128)
    cases = [isolated_case(seed, None, config)] + [isolated_case(seed, n, config) for n in FINDINGS]
    return np.concatenate([c.image for c in cases], axis=1)
