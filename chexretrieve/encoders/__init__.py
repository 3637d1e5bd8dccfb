"""Image-text encoders behind one interface (``Encoder``), loaded by ``load_encoder(spec)``.

Importing this package is cheap: torch and transformers load only with an encoder.
"""

from chexretrieve.encoders.base import Encoder, EncoderError
from chexretrieve.encoders.config import EncoderConfig
from chexretrieve.encoders.registry import load_encoder, parse_encoder_spec

__all__ = ["Encoder", "EncoderConfig", "EncoderError", "load_encoder", "parse_encoder_spec"]
