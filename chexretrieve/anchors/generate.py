"""Generate anchor sets with an LLM through an OpenAI-compatible endpoint (sole openai importer).

Two prompt styles:

- ``structured`` (default): our prompt for one finding, answered as JSON
  ``{"sentences": [{"text", "polarity"}]}``, constrained by ``response_format`` ``json_schema``
  where the endpoint supports it.
- ``paper``: the paper's prompt (Appendix E.6) verbatim; the answer is a Python dict literal over
  all 13 conditions, from which the requested finding's list is taken; polarities are inferred by
  rule.

Only finding names and counts are sent; never patient data. Every variant of a run is generated and
checked before anything is written, so a failure writes nothing; no file is ever overwritten.
"""

from __future__ import annotations

import ast
import datetime as _dt
import itertools
import json
import os
import re
import string
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai

from chexretrieve.anchors.anchor_set import AnchorSet, AnchorSource, anchors_root
from chexretrieve.anchors.config import GenerationConfig, ValidationConfig
from chexretrieve.anchors.files import _normalise, find_anchor_sets, save_new_version
from chexretrieve.anchors.topics import infer_polarity, on_topic_fraction
from chexretrieve.findings import FINDINGS, canonical_finding, finding_slug

#: the prompt of the paper's Appendix E.6, quoted as published (straight quotes)
PAPER_PROMPT = (
    "For the conditions in LABELS = [" + ", ".join(f'"{f}"' for f in FINDINGS) + "] Give a "
    "python dictionary where the keys are the different conditions and the values are a list of "
    "strings of different possible doctor report notes for that condition. Have positive and "
    "negative entries. Have each list be of size around 50"
)

STRUCTURED_SYSTEM = (
    "You write example sentences in the style of chest radiograph reports for a retrieval system. "
    "Answer only with JSON that follows the given schema."
)

STRUCTURED_USER = (
    "Write {n} distinct sentences that a radiologist could write in a chest X-ray report about "
    'the finding "{finding}". About 60% should be positive (the finding is present, suspected or '
    "changed: vary size, severity, location, laterality, hedging and comparison with a prior "
    "study) and about 40% negative (the finding is absent or resolved). Every sentence must be "
    "about {finding}; one sentence per entry, at most 200 characters, no numbering, no patient "
    'details. Label each sentence\'s polarity as "positive" or "negative".'
)

ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["sentences"],
    "properties": {
        "sentences": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["text", "polarity"],
                "properties": {
                    "text": {"type": "string"},
                    "polarity": {"type": "string", "enum": ["positive", "negative"]},
                },
            },
        }
    },
}

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_REFUSAL = re.compile(r"^\s*(i'?m sorry|i am sorry|i can(?:'|no)t|i cannot|i won'?t|sorry,)", re.I)
_FENCE = re.compile(r"```(?:json|python|py)?\s*\n(.*?)```", re.S)
_RETRYABLE = (
    openai.APITimeoutError,
    openai.APIConnectionError,
    openai.RateLimitError,
    openai.InternalServerError,
)


class GenerationError(ValueError):
    """The endpoint or its answer failed; nothing was written. The message says what to do."""


@dataclass(frozen=True)
class GeneratedVariant:
    sentences: tuple[tuple[str, str], ...]  # (text, polarity)
    dropped: tuple[tuple[str, str], ...]  # (text, reason)
    attempts: int


def api_key_from_env(config: GenerationConfig) -> str:
    key = os.environ.get(config.api_key_env, "").strip()
    if not key:
        raise GenerationError(
            f"no API key: set the environment variable {config.api_key_env} (or choose another "
            f"variable with --api-key-env); keys are never read from files or written anywhere"
        )
    return key


class _DeadlineTransport(httpx.HTTPTransport):
    """Bounds a whole answer, not each read: a server that drips its body byte by byte is cut
    off after ``seconds`` (httpx's own timeouts restart with every byte received)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = time.monotonic() + self.seconds
        response = super().handle_request(request)
        response.stream = _DeadlineStream(response.stream, deadline, request)
        return response


class _DeadlineStream(httpx.SyncByteStream):
    def __init__(self, inner, deadline: float, request: httpx.Request) -> None:  # noqa: ANN001
        self._inner, self._deadline, self._request = inner, deadline, request

    def __iter__(self):  # noqa: ANN204
        for chunk in self._inner:
            if time.monotonic() > self._deadline:
                raise httpx.ReadTimeout("the answer did not arrive in time", request=self._request)
            yield chunk

    def close(self) -> None:
        self._inner.close()


def make_client(config: GenerationConfig) -> openai.OpenAI:
    """An OpenAI client for ``config.base_url`` with our own retry loop (client retries off), a
    deadline on each whole answer, and no redirects followed (the endpoint is what was set)."""
    return openai.OpenAI(
        api_key=api_key_from_env(config),
        base_url=config.base_url,
        timeout=config.timeout_s,
        max_retries=0,
        http_client=httpx.Client(
            transport=_DeadlineTransport(config.timeout_s),
            timeout=config.timeout_s,
            follow_redirects=False,
        ),
    )


def build_messages(finding: str, config: GenerationConfig) -> tuple[list[dict], dict | None]:
    """Chat messages and response_format for one variant (contains only the finding name)."""
    if config.prompt_style == "paper":
        return [{"role": "user", "content": PAPER_PROMPT}], None
    if config.prompt_style != "structured":
        raise GenerationError(
            f"prompt style {config.prompt_style!r} is unknown; use 'structured' or 'paper'"
        )
    user = STRUCTURED_USER.format(n=config.n, finding=finding)
    messages = [{"role": "system", "content": STRUCTURED_SYSTEM}, {"role": "user", "content": user}]
    response_format = None
    if config.use_json_schema:
        response_format = {
            "type": "json_schema",
            "json_schema": {"name": "anchor_sentences", "strict": True, "schema": ANSWER_SCHEMA},
        }
    return messages, response_format


def request_completion(
    client: Any,
    config: GenerationConfig,
    messages: list[dict],
    response_format: dict | None,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[str, str | None, int]:
    """Send one chat completion with bounded retries; return (content, finish_reason, attempts)."""
    kwargs: dict[str, Any] = {
        "model": config.model,
        "messages": messages,
        "temperature": config.temperature,
    }
    if response_format is not None:
        kwargs["response_format"] = response_format
    attempts = 0
    while True:
        attempts += 1
        try:
            response = client.chat.completions.create(**kwargs)
            break
        except _RETRYABLE as exc:
            if attempts > config.max_retries:
                kind = "timed out" if isinstance(exc, openai.APITimeoutError) else "failed"
                raise GenerationError(
                    f"request to {config.base_url} {kind} after {attempts} attempt(s) "
                    f"({type(exc).__name__}: {exc}); check the endpoint, or raise --timeout / "
                    f"--retries"
                ) from exc
            sleep(config.backoff_s * 2 ** (attempts - 1))
        except openai.APIStatusError as exc:
            raise GenerationError(
                f"{config.base_url} answered HTTP {exc.status_code}: {exc.message}; check the "
                f"model name, the key and the endpoint (not retried)"
            ) from exc
        except (openai.OpenAIError, ValueError) as exc:
            raise GenerationError(
                f"{config.base_url} returned an unreadable response ({type(exc).__name__}: {exc})"
            ) from exc
    try:
        choice = response.choices[0]
        message = choice.message
    except (AttributeError, IndexError, TypeError) as exc:
        raise GenerationError(f"{config.base_url} returned a response without choices") from exc
    refusal = getattr(message, "refusal", None)
    if refusal:
        raise GenerationError(f"the model refused: {refusal!r}; nothing was written")
    content = message.content or ""
    if _REFUSAL.match(content) and "{" not in content:
        raise GenerationError(f"the model refused: {content[:200]!r}; nothing was written")
    if not content.strip():
        raise GenerationError("the model returned an empty answer; nothing was written")
    return content, choice.finish_reason, attempts


def _strip_fence(content: str) -> str:
    match = _FENCE.search(content)
    return match.group(1) if match else content.strip()


def _truncated_hint(finish_reason: str | None) -> str:
    if finish_reason == "length":
        return (
            " (the answer was cut off at the token limit: partial output; ask for fewer sentences)"
        )
    return ""


def parse_structured_answer(content: str, finish_reason: str | None) -> list[tuple[str, str]]:
    """``{"sentences": [{"text", "polarity"}]}`` -> pairs; malformed or partial JSON is an error."""
    try:
        data = json.loads(_strip_fence(content))
    except json.JSONDecodeError as exc:
        raise GenerationError(
            f"the answer is not valid JSON: {exc.msg} at character {exc.pos}"
            + _truncated_hint(finish_reason)
        ) from exc
    if finish_reason == "length":
        raise GenerationError("the answer was cut off at the token limit" + _truncated_hint(None))
    items = data.get("sentences") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise GenerationError("the JSON answer has no 'sentences' list; expected the schema")
    pairs = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            raise GenerationError(f"answer entry {i} is not an object with a 'text' string")
        polarity = item.get("polarity")
        if polarity not in ("positive", "negative"):
            raise GenerationError(
                f"answer entry {i} has polarity {polarity!r}, not positive/negative"
            )
        pairs.append((item["text"], polarity))
    return pairs


def parse_paper_answer(
    content: str, finish_reason: str | None, finding: str
) -> list[tuple[str, str]]:
    """A Python dict literal {condition: [notes]} -> the finding's pairs (polarity by rule)."""
    body = _strip_fence(content)
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end <= start:
        raise GenerationError("the answer holds no dictionary" + _truncated_hint(finish_reason))
    body = body[start : end + 1]
    try:
        data = ast.literal_eval(body)
    except (ValueError, SyntaxError) as exc:
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            raise GenerationError(
                f"the answer is not a valid dictionary literal ({exc})"
                + _truncated_hint(finish_reason)
            ) from exc
    if not isinstance(data, dict):
        raise GenerationError("the answer is not a dictionary of condition -> list of notes")
    by_name = {str(k).strip().lower(): v for k, v in data.items()}
    notes = by_name.get(finding.lower())
    if not isinstance(notes, list):
        raise GenerationError(f"the answer has no list for {finding!r} (keys: {list(data)[:13]})")
    return [(str(note), infer_polarity(str(note))) for note in notes if isinstance(note, str)]


def clean_sentences(
    pairs: list[tuple[str, str]],
    finding: str,
    config: GenerationConfig,
    validation: ValidationConfig | None = None,
) -> GeneratedVariant:
    """Strip, drop empty / over-long / duplicate sentences, then check size, balance and topic."""
    validation = validation or ValidationConfig()
    kept: list[tuple[str, str]] = []
    dropped: list[tuple[str, str]] = []
    seen: set[str] = set()
    for text, polarity in pairs:
        clean = " ".join(text.split()).strip().strip('"').strip()
        clean = re.sub(r"^(?:\d+[.)]|[-*•])\s+", "", clean)
        if not clean:
            dropped.append((text, "empty"))
        elif _CONTROL.search(clean):  # NUL, terminal escapes: nothing a report sentence holds
            dropped.append((clean, "control characters"))
        elif len(clean) > validation.max_sentence_chars:
            dropped.append((clean, f"longer than {validation.max_sentence_chars} characters"))
        elif _normalise(clean) in seen:
            dropped.append((clean, "duplicate"))
        else:
            seen.add(_normalise(clean))
            kept.append((clean, polarity))
    if len(kept) > config.n:  # an endpoint that floods: keep what was asked for
        dropped.extend((t, f"beyond the {config.n} requested") for t, _ in kept[config.n :])
        kept = kept[: config.n]
    needed = max(1, int(round(config.n * config.min_kept_fraction)))
    if len(kept) < needed:
        raise GenerationError(
            f"only {len(kept)} usable sentences for {finding} (asked for {config.n}, need at least "
            f"{needed}); {len(dropped)} dropped as empty, over-long, duplicate or holding control "
            "characters"
        )
    polarities = {p for _, p in kept}
    if polarities != {"positive", "negative"}:
        raise GenerationError(
            f"the answer for {finding} has only {polarities.pop()} sentences; both are required"
        )
    share = on_topic_fraction([t for t, _ in kept], finding)
    if share < config.min_on_topic_fraction:
        raise GenerationError(
            f"off-topic answer: only {share:.0%} of the sentences mention {finding} or a synonym "
            f"(need {config.min_on_topic_fraction:.0%}); nothing was written"
        )
    return GeneratedVariant(tuple(kept), tuple(dropped), 0)


def next_variant_names(existing: set[str], count: int) -> list[str]:
    """The first ``count`` unused variant names in the order a..z, aa..zz."""
    names = (
        "".join(letters)
        for size in (1, 2)
        for letters in itertools.product(string.ascii_lowercase, repeat=size)
    )
    return list(itertools.islice((n for n in names if n not in existing), count))


def generate_anchor_sets(
    finding: str,
    config: GenerationConfig,
    root: str | Path | None = None,
    client: Any = None,
    sleep: Callable[[float], None] = time.sleep,
    today: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[AnchorSet]:
    """Ask for ``config.variants`` independent variants; return them as new sets (not saved)."""
    finding = canonical_finding(finding)
    if config.n < 1 or config.variants < 1:
        raise GenerationError("--n and --variants must be at least 1")
    if config.max_retries < 0:
        raise GenerationError("--retries must be >= 0")
    client = client if client is not None else make_client(config)
    today = today or _dt.date.today().isoformat()
    root = Path(root) if root is not None else anchors_root()
    existing = (
        {s.variant for s in find_anchor_sets(root, finding=finding)}
        if (root / "findings" / finding_slug(finding)).is_dir()
        else set()
    )
    variant_names = next_variant_names({v for v in existing if v}, config.variants)
    results = []
    for index, variant in enumerate(variant_names):
        messages, response_format = build_messages(finding, config)
        content, finish_reason, attempts = request_completion(
            client, config, messages, response_format, sleep
        )
        if config.prompt_style == "paper":
            pairs = parse_paper_answer(content, finish_reason, finding)
        else:
            pairs = parse_structured_answer(content, finish_reason)
        cleaned = clean_sentences(pairs, finding, config)
        source = AnchorSource(
            kind="llm",
            model=config.model,
            prompt="\n\n".join(m["content"] for m in messages),
            date=today,
            parameters={
                "endpoint": config.base_url,
                "temperature": config.temperature,
                "n_requested": config.n,
                "prompt_style": config.prompt_style,
                "json_schema": bool(response_format),
                "polarity": "rule (topics.infer_polarity)"
                if config.prompt_style == "paper"
                else "model",
                "dropped": len(cleaned.dropped),
                "attempts": attempts,
                "generation": f"{index + 1} of {config.variants}",
            },
        )
        results.append(
            AnchorSet.create(
                sentences=cleaned.sentences,
                source=source,
                finding=finding,
                variant=variant,
                description=f"{finding}: LLM generation {variant} ({config.model}, "
                f"{config.prompt_style} prompt)",
                created=today,
            )
        )
        if progress is not None:
            progress(index + 1)
    return results


def generate_and_save(
    finding: str,
    config: GenerationConfig,
    root: str | Path | None = None,
    client: Any = None,
    sleep: Callable[[float], None] = time.sleep,
    today: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[Path]:
    """Generate every variant first, then write them all as new files (nothing on any failure)."""
    sets = generate_anchor_sets(finding, config, root, client, sleep, today, progress)
    root = Path(root) if root is not None else anchors_root()
    clashes = [str(root / s.relative_path()) for s in sets if (root / s.relative_path()).exists()]
    if clashes:
        raise GenerationError(f"refusing to overwrite existing files: {', '.join(clashes)}")
    return [save_new_version(s, root) for s in sets]
