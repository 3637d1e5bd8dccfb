"""Image-text encoders behind one interface (``Encoder``), loaded by ``load_encoder(spec)``.

Importing this package is cheap: torch and transformers load only with an encoder.
"""

from chexretrieve.encoders.base import Encoder, EncoderError
from chexretrieve.encoders.config import EncoderConfig
from chexretrieve.encoders.registry import (
    EncoderSpec,
    list_encoders,
    load_encoder,
    parse_encoder_spec,
    resolve_tokenizer,
)

__all__ = [
    "Encoder",
    "EncoderConfig",
    "EncoderError",
    "EncoderSpec",
    "list_encoders",
    "load_encoder",
    "parse_encoder_spec",
    "resolve_tokenizer",
]
