"""``load_encoder(spec)``: one entry point for every encoder kind.

Spec strings:

- ``phantom`` or ``phantom:/path/to/weights.pt`` - the offline phantom model
  (``chexretrieve.encoders.phantom``, imported only when asked for);
- ``chexzero:/path/to/checkpoint.pt`` - one CheXzero checkpoint (load each of several separately);
  the tokenizer comes from ``EncoderConfig.tokenizer_path``;
- ``hf-clip:/path/to/folder`` - a Hugging Face CLIP-family folder, read with local_files_only.
"""

from __future__ import annotations

from pathlib import Path

from chexretrieve.encoders.base import Encoder, EncoderError
from chexretrieve.encoders.config import EncoderConfig

#: encoder kinds and whether their spec needs a path after the colon
ENCODER_KINDS = {"phantom": False, "chexzero": True, "hf-clip": True}


def parse_encoder_spec(spec: str) -> tuple[str, Path | None]:
    """(kind, path or None) for a spec string; EncoderError naming the accepted forms."""
    kind, _, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    forms = "'phantom[:WEIGHTS.pt]', 'chexzero:CHECKPOINT.pt' or 'hf-clip:FOLDER'"
    if kind not in ENCODER_KINDS:
        raise EncoderError(f"unknown encoder {spec!r}: use {forms}")
    path = rest.strip()
    if not path and ENCODER_KINDS[kind]:
        raise EncoderError(f"encoder {spec!r} needs a path after '{kind}:'; use {forms}")
    return kind, (Path(path).expanduser() if path else None)


def load_encoder(spec: str, config: EncoderConfig | None = None) -> Encoder:
    """The encoder named by ``spec`` (see the module docstring), on the device ``config`` picks."""
    kind, path = parse_encoder_spec(spec)
    config = config or EncoderConfig()
    if kind == "chexzero":
        from chexretrieve.encoders.chexzero import load_chexzero_encoder

        return load_chexzero_encoder(path, config)
    if kind == "hf-clip":
        from chexretrieve.encoders.hf_clip import load_hf_clip_encoder

        return load_hf_clip_encoder(path, config)
    try:
        from chexretrieve.encoders.phantom import load_phantom_encoder
    except ModuleNotFoundError as error:
        if error.name != "chexretrieve.encoders.phantom":
            raise
        raise EncoderError(
            "the phantom encoder (chexretrieve.encoders.phantom) is not available in this install"
        ) from error
    return load_phantom_encoder(path, config)
