"""``load_encoder(spec)``: the one place encoder specs are parsed and encoders are built.

A spec is ``KIND[:ARGUMENT][?OPTION=VALUE[&OPTION=VALUE]]``; the kinds (``list_encoders()``):

- ``phantom`` or ``phantom:/path/to/weights.pt`` - the offline phantom model
  (``chexretrieve.encoders.phantom``, imported only when asked for; the default is phantom-v4);
  ``phantom:phantom-v1`` ... ``phantom:phantom-v3`` or a stored id such as
  ``phantom:485f39c445ab`` the older bundled weights (stores embedded with them);
- ``chexzero:/path/to/checkpoint.pt[?tokenizer=/path/to/bpe_simple_vocab_16e6.txt.gz]`` - one
  CheXzero checkpoint (load each of several separately); the tokenizer is resolved by
  ``resolve_tokenizer`` (spec option, ``EncoderConfig.tokenizer_path``, ``CHEXRETRIEVE_TOKENIZER``,
  or a ``bpe_simple_vocab_16e6.txt.gz`` beside the checkpoint);
- ``hf-clip:/path/to/folder`` - a Hugging Face CLIP-family folder (CLIP, MetaCLIP 2, SigLIP,
  SigLIP 2), read with local_files_only; the folder brings its own tokenizer;
- ``stand-in[:MS[:DIM]]`` - the fixed-cost test stand-in (``chexretrieve.encoders.stand_in``), only
  with ``CHEXRETRIEVE_TEST_ENCODERS=1``.

Anything that cannot be loaded raises ``EncoderError`` with a message saying what to change.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chexretrieve.encoders.base import Encoder, EncoderError
from chexretrieve.encoders.config import EncoderConfig

#: environment variable naming CheXzero's tokenizer when neither the spec nor the config does
TOKENIZER_ENV = "CHEXRETRIEVE_TOKENIZER"
#: the tokenizer file looked for beside a CheXzero checkpoint when nothing else names one
SIBLING_TOKENIZER = "bpe_simple_vocab_16e6.txt.gz"


@dataclass(frozen=True)
class EncoderSpec:
    """A parsed spec string."""

    kind: str  # registered kind, lower case ("chexzero", "hf-clip", ...)
    argument: str  # text after the colon (a path for most kinds), "" when there is none
    options: tuple[tuple[str, str], ...] = ()  # "?name=value" pairs in the order given

    @property
    def path(self) -> Path | None:
        return Path(self.argument).expanduser() if self.argument else None

    def option(self, name: str) -> str | None:
        return dict(self.options).get(name)


@dataclass(frozen=True)
class EncoderKind:
    """One registered encoder kind."""

    name: str  # the spec prefix
    form: str  # the spec's shape, for messages and `list_encoders`
    summary: str  # one line: what it loads
    needs_argument: bool  # whether a path (or other argument) must follow the colon
    options: tuple[str, ...]  # the "?name=value" options it accepts
    load: Callable[[EncoderSpec, EncoderConfig], Encoder]  # builds the encoder


def _load_phantom(spec: EncoderSpec, config: EncoderConfig) -> Encoder:
    try:
        from chexretrieve.encoders.phantom import load_phantom_encoder
    except ModuleNotFoundError as error:
        if error.name != "chexretrieve.encoders.phantom":
            raise
        raise EncoderError(
            "the phantom encoder (chexretrieve.encoders.phantom) is not available in this install"
        ) from error
    return load_phantom_encoder(spec.path, config)


def _load_chexzero(spec: EncoderSpec, config: EncoderConfig) -> Encoder:
    from chexretrieve.encoders.chexzero import load_chexzero_encoder

    tokenizer = resolve_tokenizer(spec, config)
    return load_chexzero_encoder(spec.path, dataclasses.replace(config, tokenizer_path=tokenizer))


def _load_hf_clip(spec: EncoderSpec, config: EncoderConfig) -> Encoder:
    from chexretrieve.encoders.hf_clip import load_hf_clip_encoder

    return load_hf_clip_encoder(spec.path, config)


def _load_stand_in(spec: EncoderSpec, config: EncoderConfig) -> Encoder:
    from chexretrieve.encoders.stand_in import load_stand_in

    return load_stand_in(f"stand-in:{spec.argument}" if spec.argument else "stand-in")


_KINDS = {
    kind.name: kind
    for kind in (
        EncoderKind(
            "chexzero", "chexzero:CHECKPOINT.pt[?tokenizer=BPE.txt.gz]",
            "CheXzero (OpenAI CLIP ViT) state dict; tokenizer from the spec, --tokenizer, "
            f"${TOKENIZER_ENV} or {SIBLING_TOKENIZER} beside the checkpoint",
            True, ("tokenizer",), _load_chexzero,
        ),
        EncoderKind(
            "hf-clip", "hf-clip:FOLDER",
            "Hugging Face CLIP / MetaCLIP 2 / SigLIP / SigLIP 2 folder (save_pretrained)",
            True, (), _load_hf_clip,
        ),
        EncoderKind(
            "phantom", "phantom[:WEIGHTS.pt]",
            "the offline phantom model (demo and tests; default phantom-v4); phantom:phantom-v1 "
            "... phantom:phantom-v3 or a stored id (phantom:485f39c445ab) load the older bundled "
            "weights",
            False, (), _load_phantom,
        ),
        EncoderKind(
            "stand-in", "stand-in[:MS[:DIM]]",
            "fixed-cost test stand-in, only with CHEXRETRIEVE_TEST_ENCODERS=1",
            False, (), _load_stand_in,
        ),
    )
}  # fmt: skip


def list_encoders() -> list[EncoderKind]:
    """The registered encoder kinds (name, spec form, one-line summary), by name."""
    return [_KINDS[name] for name in sorted(_KINDS)]


def _accepted_forms() -> str:
    return ", ".join(f"'{kind.form}'" for kind in list_encoders())


def parse_encoder_spec(spec: str) -> EncoderSpec:
    """The parsed spec; EncoderError naming the accepted forms when it is malformed."""
    if not isinstance(spec, str):
        raise EncoderError(f"an encoder spec is a string, not {type(spec).__name__}")
    text = spec.strip()
    head, _, rest = text.partition(":")
    name = head.strip().lower()
    options: list[tuple[str, str]] = []
    if "?" in name:  # "phantom?x=y": options without an argument
        name, _, query = name.partition("?")
        rest = f"?{query}{rest}"
    if name not in _KINDS:
        raise EncoderError(f"unknown encoder {spec!r}: use {_accepted_forms()}")
    kind = _KINDS[name]
    argument, marker, query = rest.rpartition("?")
    if not marker or "=" not in query:  # no options (a '?' inside a path stays in the path)
        argument, query = rest, ""
    for pair in filter(None, query.split("&")):
        key, equals, value = pair.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not equals or not value:
            raise EncoderError(f"encoder {spec!r}: option {pair!r} is not NAME=VALUE")
        if key not in kind.options:
            accepted = ", ".join(kind.options) or "none"
            raise EncoderError(
                f"encoder {spec!r}: '{name}' has no option {key!r} (its options: {accepted})"
            )
        options.append((key, value))
    argument = argument.strip()
    if not argument and kind.needs_argument:
        raise EncoderError(f"encoder {spec!r} needs a path after '{name}:'; use '{kind.form}'")
    return EncoderSpec(name, argument, tuple(options))


def resolve_tokenizer(spec: EncoderSpec | str, config: EncoderConfig | None = None) -> Path | None:
    """CheXzero's tokenizer for ``spec``, first found of: the spec's ``?tokenizer=``,
    ``config.tokenizer_path`` (CLI ``--tokenizer``), ``$CHEXRETRIEVE_TOKENIZER``, a
    ``bpe_simple_vocab_16e6.txt.gz`` beside the checkpoint; None when there is none (the encoder
    then embeds images only). A spec option and a different config path raise EncoderError."""
    spec = parse_encoder_spec(spec) if isinstance(spec, str) else spec
    from_config = config.tokenizer_path if config is not None else None
    from_spec = spec.option("tokenizer")
    if from_spec is not None:
        path = Path(from_spec).expanduser()
        if from_config is not None and Path(from_config).expanduser() != path:
            raise EncoderError(
                f"two tokenizers given: {path} in the encoder spec and {from_config} by "
                "--tokenizer / EncoderConfig.tokenizer_path; keep one"
            )
        return path
    if from_config is not None:
        return Path(from_config).expanduser()
    from_env = os.environ.get(TOKENIZER_ENV, "").strip()
    if from_env:
        return Path(from_env).expanduser()
    if spec.path is not None:
        sibling = spec.path.parent / SIBLING_TOKENIZER
        if sibling.is_file():
            return sibling
    return None


def load_encoder(
    spec: str, device: str | EncoderConfig | None = None, *, config: EncoderConfig | None = None
) -> Encoder:
    """The encoder named by ``spec`` (see the module docstring).

    ``device`` ("auto", "cpu", "cuda", "cuda:N") overrides ``config.device`` when given; an
    ``EncoderConfig`` in its place is taken as ``config`` (the older call form). Every failure to
    load is an EncoderError whose message names the spec and what to change.
    """
    if isinstance(device, EncoderConfig):
        if config is not None:
            raise TypeError("load_encoder: an EncoderConfig given twice (device and config)")
        device, config = None, device
    config = config or EncoderConfig()
    if device is not None:
        config = dataclasses.replace(config, device=device)
    parsed = parse_encoder_spec(spec)
    try:
        return _KINDS[parsed.kind].load(parsed, config)
    except EncoderError:
        raise
    # a loader's unexpected failure (torch, transformers, the file system) still becomes one
    # actionable line instead of a traceback
    except Exception as error:
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise EncoderError(
            f"encoder {spec!r} cannot be loaded ({type(error).__name__}: {first_line}); check "
            f"that the path holds what '{_KINDS[parsed.kind].form}' expects"
        ) from error
