"""Settings of the retrieval evaluation (protocol, intervals, experiments, sources, report).

Every field carries a comment; README.md's Settings table has one row per field. The CLI
(``chexretrieve eval ...``) builds these from its options; library code never sees typer objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chexretrieve.findings import FINDINGS
from chexretrieve.geometry import GEOMETRIES

#: every geometry the evaluation knows, in its spelling (``posterior_*`` fit the broad corpus as
#: prior first; ``*_posterior``, the search spelling, is accepted as the same geometry)
ALL_GEOMETRIES: tuple[str, ...] = tuple(g.prefixed for g in GEOMETRIES)
#: values of ProtocolConfig.views
VIEW_CHOICES: tuple[str, ...] = ("frontal", "lateral", "all")
#: values of IntervalConfig.unit
BOOTSTRAP_UNITS: tuple[str, ...] = ("patient", "image")


@dataclass(frozen=True)
class ProtocolConfig:
    """Which images are queries and keys for one finding, and how labels become relevance."""

    # split whose images are the keys (the ranked gallery)
    key_split: str = "train"
    # split whose images positive for the finding are the queries
    query_split: str = "valid"
    # blank (NaN) label: "negative" counts it as 0 (CheXpert convention), "drop" removes the image
    blank_as: str = "negative"
    # uncertain (-1) label on a key: "drop" (the paper), "negative" (U-Zeros), "positive" (U-Ones)
    uncertain_as: str = "drop"
    # views used as queries and keys: "frontal" (as CheXzero evaluates), "lateral" or "all"; read
    # from view_group (a store), Frontal/Lateral (CheXpert) or ViewPosition; an image of unknown
    # view is left out unless "all" (a source recording no view at all is used whole)
    views: str = "frontal"
    # proceed although the query and key splits share patients (refused otherwise; the report
    # states the overlap)
    allow_patient_overlap: bool = False
    # a finding with fewer queries than this is reported as skipped instead of scored
    min_queries: int = 10
    # a finding with fewer relevant keys than this is reported as skipped instead of scored
    min_relevant_keys: int = 1

    def __post_init__(self) -> None:
        if self.blank_as not in ("negative", "drop"):
            raise ValueError(f"blank_as must be 'negative' or 'drop', got {self.blank_as!r}")
        if self.uncertain_as not in ("drop", "negative", "positive"):
            raise ValueError(
                f"uncertain_as must be 'drop', 'negative' or 'positive', got {self.uncertain_as!r}"
            )
        if self.views not in VIEW_CHOICES:
            raise ValueError(f"views must be one of {', '.join(VIEW_CHOICES)}, got {self.views!r}")
        if self.min_queries < 1 or self.min_relevant_keys < 1:
            raise ValueError(
                f"min_queries and min_relevant_keys must be at least 1, got {self.min_queries} "
                f"and {self.min_relevant_keys}"
            )
        if self.key_split == self.query_split:
            raise ValueError(
                f"key_split and query_split are both {self.key_split!r}; queries must come from "
                "another split than the keys"
            )


@dataclass(frozen=True)
class IntervalConfig:
    """The two-level bootstrap behind every 95% interval (see evaluation/intervals.py)."""

    # bootstrap replicates
    n_bootstrap: int = 1000
    # coverage of the percentile interval
    confidence: float = 0.95
    # "shared": one query draw per replicate for all cells (the queries are the same images in
    # every cell); "per_cell": each drawn variant x checkpoint cell gets its own query draw
    query_resampling: str = "shared"
    # seed of the bootstrap's random generator
    seed: int = 0
    # what a replicate resamples: "patient" (a cluster bootstrap: every drawn patient brings all
    # its query images; images without a patient id are their own patient) or "image"
    unit: str = "patient"

    def __post_init__(self) -> None:
        if self.unit not in BOOTSTRAP_UNITS:
            raise ValueError(f"unit must be one of {', '.join(BOOTSTRAP_UNITS)}, got {self.unit!r}")
        if self.n_bootstrap < 1:
            raise ValueError(f"n_bootstrap must be at least 1, got {self.n_bootstrap}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must lie strictly between 0 and 1, got {self.confidence}")
        if self.query_resampling not in ("shared", "per_cell"):
            raise ValueError(
                f"query_resampling must be 'shared' or 'per_cell', got {self.query_resampling!r}"
            )


@dataclass(frozen=True)
class RetrievalEvalConfig:
    """Tables 2 and 3: per-finding AUPRC of every geometry and its differences to the references."""

    # findings to evaluate (CheXpert names)
    findings: tuple[str, ...] = FINDINGS
    # geometry specs "name" or "name:key=value,..." (names from ALL_GEOMETRIES)
    geometries: tuple[str, ...] = ALL_GEOMETRIES
    # geometries every other one is compared against (Table 2 uses both, Table 3 cosine)
    references: tuple[str, ...] = ("cosine", "iti")
    # use at most this many anchor-set variants per finding (None: all found)
    max_variants: int | None = None
    # inverse temperature of the anchor geometries (None: the encoder's own exp(logit_scale))
    inv_temperature: float | None = None
    # largest query-batch x keys score block held in memory at once (float64 elements)
    max_block_elements: int = 4_000_000
    # protocol (queries, keys, relevance)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    # bootstrap intervals
    intervals: IntervalConfig = field(default_factory=IntervalConfig)


@dataclass(frozen=True)
class MixingConfig:
    """Experiment (a), paper Fig. 3: finding anchors mixed with nuisance anchors at weight p."""

    # weights p of the finding anchors (1 - p goes to the nuisance anchors)
    weights: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    # findings whose anchors are mixed (each gets its own curve pair)
    findings: tuple[str, ...] = ("Pleural Effusion", "Cardiomegaly")
    # context of the nuisance anchor set under anchors/ (e.g. "nuisance/projection-habitus")
    nuisance: str = "nuisance/projection-habitus"
    # label column of the nuisance coordinate; relevance = same value as the query (e.g. AP vs PA)
    nuisance_label: str = "AP/PA"
    # geometry of the mixture (softmax uses per-anchor weights)
    geometry: str = "softmax"


@dataclass(frozen=True)
class BudgetConfig:
    """Experiment (b), paper Fig. 4: AUPRC versus the number of anchors, per geometry."""

    # anchor counts drawn from the finding's pooled anchor variants
    anchor_counts: tuple[int, ...] = (4, 8, 16, 32, 64, 128, 256)
    # random anchor draws per count (cells of the bootstrap band, with the checkpoints)
    repeats: int = 3
    # geometries compared (cosine is drawn as a flat reference line)
    geometries: tuple[str, ...] = (
        "softmax",
        "gaussian",
        "latent_gaussian",
        "latent_spherical",
        "gmm",
        "movmf",
    )
    # findings averaged over (empty: the retrieval evaluation's findings)
    findings: tuple[str, ...] = ()
    # with no findings named, use the this-many evaluated findings with most queries (None: all)
    max_findings: int | None = 4
    # seed of the anchor draws
    seed: int = 0


@dataclass(frozen=True)
class PosteriorConfig:
    """Experiment (c), paper Fig. 5: target-only versus posterior models with a broad prior."""

    # numbers of target (finding) anchors
    target_counts: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
    # random draws per count
    repeats: int = 3
    # target-only models; each one with a posterior_ twin is also run adapted from the broad corpus
    geometries: tuple[str, ...] = ("softmax", "gaussian", "latent_spherical", "gmm")
    # posterior models (specs); empty: the posterior_ twin of each target-only model that has one.
    # The posterior latent models' default k is the 95%-variance rule on the posterior Bingham
    # matrix ("posterior_latent_spherical:k=32" sets it); k = d ranks as cosine and is refused
    posterior_geometries: tuple[str, ...] = ()
    # findings averaged over (empty: the retrieval evaluation's findings)
    findings: tuple[str, ...] = ()
    # with no findings named, use the this-many evaluated findings with most queries (None: all)
    max_findings: int | None = 4
    # seed of the anchor draws
    seed: int = 0


@dataclass(frozen=True)
class TemperatureConfig:
    """Mean AUPRC of each geometry against the inverse temperature (and inv_t x cosine spread)."""

    # inverse temperatures evaluated (the encoder's own exp(logit_scale) is always added)
    inv_temperatures: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0)
    # geometries compared; cosine, ITI, Gaussian and the latent models do not depend on inv_t
    # (GMM and MovMF do, but refitting them at every inv_t costs minutes per point)
    geometries: tuple[str, ...] = ("cosine", "iti", "softmax", "gaussian")
    # anchor variants per finding used (None: all; each is one cell of the intervals)
    max_variants: int | None = None

    def __post_init__(self) -> None:
        if not self.inv_temperatures or min(self.inv_temperatures) <= 0:
            raise ValueError(
                "TemperatureConfig.inv_temperatures must be a non-empty list of positive numbers"
            )


@dataclass(frozen=True)
class RuntimeConfig:
    """Experiment (d), paper Table 4: fit + features + top-k retrieval time vs number of anchors."""

    # number of queries Q (the paper: 10,000)
    n_queries: int = 1000
    # number of gallery items G (the paper: 50,000)
    n_gallery: int = 10000
    # embedding dimension
    dim: int = 512
    # anchor-set sizes N
    anchor_counts: tuple[int, ...] = (10, 100, 1000, 10000)
    # geometries timed
    geometries: tuple[str, ...] = ("cosine", "softmax", "gaussian", "latent_gaussian")
    # timed runs per cell (the paper: 10)
    repeats: int = 3
    # untimed warm-up runs per cell (the paper: 3)
    warmup: int = 1
    # neighbours kept per query
    top_k: int = 10
    # "cpu", "cuda", or "auto" (cuda when torch sees one; only the scoring matmul moves there)
    device: str = "auto"
    # seed of the random embeddings
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.n_queries, self.n_gallery, self.dim, self.repeats, self.top_k) < 1:
            raise ValueError(
                "RuntimeConfig: n_queries, n_gallery, dim, repeats and top_k must all be >= 1"
            )
        if self.warmup < 0 or not self.anchor_counts or min(self.anchor_counts) < 1:
            raise ValueError(
                "RuntimeConfig: warmup must be >= 0 and anchor_counts a non-empty list of "
                "positive sizes"
            )


@dataclass(frozen=True)
class PhantomSourceConfig:
    """The default source: a generated phantom archive embedded with the phantom encoder."""

    # images in the generated archive (train + valid)
    n_images: int = 1200
    # generation seed
    seed: int = 0
    # folder holding the labels and embedding caches (reused when present); None = eval/ under
    # the cache root ($CHEXRETRIEVE_CACHE, see chexretrieve.cache); "" = no cache
    cache_dir: str | None = None
    # processes generating phantom cases while the main process embeds them
    workers: int = 2
    # labels of the validation split (the queries): "truth" (the true 0/1 labels, as the archive's
    # valid.csv and CheXpert's radiologist-labelled validation set) or "reported" (report-derived)
    validation_labels: str = "truth"

    def __post_init__(self) -> None:
        if self.validation_labels not in ("truth", "reported"):
            raise ValueError(
                f"validation_labels must be 'truth' or 'reported', got {self.validation_labels!r}"
            )


@dataclass(frozen=True)
class ChexpertSourceConfig:
    """A CheXpert-layout folder (train.csv / valid.csv + images) and CheXzero checkpoints."""

    # folder holding train.csv and valid.csv (CheXpert-v1.0 or CheXpert-v1.0-small)
    root: str = ""
    # CheXzero checkpoint files; each is one cell dimension of the intervals
    checkpoints: tuple[str, ...] = ()
    # tokenizer file or folder the CheXzero text tower needs
    tokenizer: str | None = None
    # images embedded per forward pass
    batch_size: int = 32
    # use at most this many images per split (None: all), sampled with a fixed seed, for smoke runs
    max_images_per_split: int | None = None
    # folder for embedding caches keyed by encoder id and image list (None: no cache)
    cache_dir: str | None = None


@dataclass(frozen=True)
class NaturalImageConfig:
    """The natural-image protocol: a labelled image folder with class and style labels."""

    # root/<style>/<class>/<image> layout, or a CSV with columns path,class,style
    root: str = ""
    # CSV of labels (relative paths resolved against root); None: the folder layout
    labels_csv: str | None = None
    # class anchors: one sentence per class per template ("{}" is the class name; the paper's)
    class_templates: tuple[str, ...] = ("a photo of a {}",)
    # style anchors: one sentence per style per template ("{}" is the style name; the paper's)
    style_templates: tuple[str, ...] = ("a {} rendition of an object",)
    # mixture weights p of the class anchors (1 - p goes to the style anchors)
    weights: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    # geometries of the per-coordinate AUPRC table (cosine always included)
    geometries: tuple[str, ...] = ("cosine", "softmax", "gaussian", "latent_spherical")
    # images embedded per forward pass
    batch_size: int = 32


EXPERIMENTS: tuple[str, ...] = ("mixing", "budget", "posterior", "temperature", "runtime")


@dataclass(frozen=True)
class EvaluationPlan:
    """One report: the retrieval tables plus the chosen experiments."""

    # Tables 2 and 3 (protocol, geometries, intervals)
    retrieval: RetrievalEvalConfig = field(default_factory=RetrievalEvalConfig)
    # experiments run after the tables, from EXPERIMENTS
    experiments: tuple[str, ...] = EXPERIMENTS
    # experiment (a): anchor mixing
    mixing: MixingConfig = field(default_factory=MixingConfig)
    # experiment (b): anchor budget
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    # experiment (c): posterior adaptation
    posterior: PosteriorConfig = field(default_factory=PosteriorConfig)
    # experiment (d): runtime (independent of the data: random embeddings)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    # AUPRC against the inverse temperature (the temperature figure)
    temperature: TemperatureConfig = field(default_factory=TemperatureConfig)
    # BLAS threads while fitting and scoring the tables and curves (many small matrices: one thread
    # avoids oversubscription; None leaves the library default); the runtime experiment is untouched
    blas_threads: int | None = 1

    def __post_init__(self) -> None:
        unknown = [e for e in self.experiments if e not in EXPERIMENTS]
        if unknown:
            raise ValueError(
                f"unknown experiments {unknown}; choose from {', '.join(EXPERIMENTS)} (or none)"
            )


@dataclass(frozen=True)
class DensityWorldConfig:
    """Which phantoms of one world ``chexretrieve eval density`` draws (evaluation/density_data)."""

    # phantom world seed (must differ from every encoder's training world)
    seed: int
    # phantoms the densities are fitted on
    n_archive: int = 1500
    # held-out phantoms (in distribution)
    n_heldout: int = 600
    # in-distribution control phantoms (scored like an OOD group; AUROC about 0.5)
    n_control: int = 200
    # source phantoms of the near shifts and display errors (each under every shift)
    n_shifted: int = 50
    # image side in pixels (phantom make's default)
    size: int = 320

    def __post_init__(self) -> None:
        for name in ("n_archive", "n_heldout", "n_control", "n_shifted"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.seed < 0:
            raise ValueError(f"the world seed must be >= 0, got {self.seed}")
