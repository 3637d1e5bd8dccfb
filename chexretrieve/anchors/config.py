"""Settings of the anchor-set package: validation limits, LLM generation, impact measurement."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ValidationConfig:
    # longest accepted sentence, in characters; longer ones are an error
    max_sentence_chars: int = 300
    # a finding set whose share of positive sentences falls below this gets a warning
    min_positive_fraction: float = 0.35
    # a finding set whose share of positive sentences rises above this gets a warning
    max_positive_fraction: float = 0.85
    # a finding set with fewer sentences than this gets a warning
    min_sentences_warning: int = 10


@dataclass(frozen=True)
class GenerationConfig:
    # model name sent to the OpenAI-compatible endpoint
    model: str = "gpt-4o-mini"
    # endpoint root, e.g. "https://api.openai.com/v1" or "http://127.0.0.1:8000/v1"
    base_url: str = "https://api.openai.com/v1"
    # environment variable that holds the API key (never stored in files)
    api_key_env: str = "OPENAI_API_KEY"
    # sentences requested per generated variant
    n: int = 50
    # independent generations (variants) requested in one run
    variants: int = 1
    # "structured" (our per-finding prompt, JSON-schema answer) or "paper" (Appendix E.6 verbatim)
    prompt_style: str = "structured"
    # ask the endpoint for a JSON-schema constrained answer (structured style only)
    use_json_schema: bool = True
    # seconds to wait for one HTTP answer before it counts as a timeout
    timeout_s: float = 120.0
    # extra attempts after a timeout, connection error, HTTP 429 or 5xx (0 = try once)
    max_retries: int = 3
    # first back-off pause in seconds; doubles after each failed attempt
    backoff_s: float = 2.0
    # sampling temperature sent with each request
    temperature: float = 1.0
    # smallest share of sentences that must mention the finding or a synonym
    min_on_topic_fraction: float = 0.6
    # smallest share of the requested n that must survive validation and de-duplication
    min_kept_fraction: float = 0.6


@dataclass(frozen=True)
class ImpactConfig:
    # geometry used to rank keys: a name of chexretrieve.geometry.GEOMETRY_KINDS (target-only;
    # posterior versions need the broad corpus, which impact does not load)
    geometry: str = "softmax"
    # ranked list length compared before and after an edit
    top_k: int = 10
    # how many most-changed queries the report lists
    show_queries: int = 5
    # inverse temperature of the geometry; None = the encoder's own logit scale
    inv_temperature: float | None = None
    # bootstrap resamples of the queries for the change's 95 % interval (0 = no interval)
    bootstrap: int = 2000
    # seed of those resamples (the interval is reproducible)
    bootstrap_seed: int = 0

    def __post_init__(self) -> None:
        if self.bootstrap < 0:
            raise ValueError(f"bootstrap must be 0 or positive, got {self.bootstrap}")
        from chexretrieve.geometry import GEOMETRY_KINDS, geometry_name

        named = geometry_name(self.geometry)  # ValueError listing the geometry names
        if named.needs_broad_corpus:
            raise ValueError(
                f"impact ranks with the edited set alone; {self.geometry!r} needs the broad "
                f"corpus as prior: choose one of {', '.join(GEOMETRY_KINDS)}"
            )
        object.__setattr__(self, "geometry", named.name)
