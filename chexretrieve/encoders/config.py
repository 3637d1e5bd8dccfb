"""Settings shared by every encoder (CheXzero, Hugging Face CLIP, phantom)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EncoderConfig:
    # where the model runs: "auto" (CUDA when available, else CPU), "cpu", "cuda" or "cuda:N"
    device: str = "auto"
    # images or sentences per forward pass; None picks one for the device (64 on CUDA, 16 on CPU)
    batch_size: int | None = None
    # run the forward pass under torch.autocast on CUDA (mixed precision); ignored on CPU
    use_autocast: bool = True
    # the autocast precision on CUDA: "float16" or "bfloat16" (benchmarks/gpu_check.sh measures
    # each one's per-image cosine to float32)
    autocast_dtype: str = "float16"
    # CheXzero's BPE tokenizer: an OpenAI bpe_simple_vocab_16e6.txt.gz file or a folder holding a
    # Hugging Face CLIP tokenizer (vocab.json + merges.txt); a spec's ?tokenizer= comes first, then
    # this, then $CHEXRETRIEVE_TOKENIZER, then the file beside the checkpoint (registry.
    # resolve_tokenizer); Hugging Face folders bring their own
    tokenizer_path: Path | None = None
    # longest tokenised sentence, start and end tokens included; longer ones are cut (CLIP: 77)
    max_text_tokens: int = 77

    def __post_init__(self) -> None:
        if self.autocast_dtype not in ("float16", "bfloat16"):
            raise ValueError(
                f"EncoderConfig.autocast_dtype must be 'float16' or 'bfloat16', got "
                f"{self.autocast_dtype!r}"
            )
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(
                f"EncoderConfig.batch_size must be at least 1 (got {self.batch_size}); "
                "use None for an automatic batch size"
            )
        if self.max_text_tokens < 2:
            raise ValueError(
                "EncoderConfig.max_text_tokens must be at least 2 to hold the start and end tokens "
                f"(got {self.max_text_tokens})"
            )
        if self.tokenizer_path is not None and not isinstance(self.tokenizer_path, Path):
            object.__setattr__(self, "tokenizer_path", Path(self.tokenizer_path))
