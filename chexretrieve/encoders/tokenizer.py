"""OpenAI CLIP's byte-level BPE tokenizer (the one CheXzero uses), read from local files.

Two file formats hold the same tokenizer:

- OpenAI's ``bpe_simple_vocab_16e6.txt.gz``: a version line, then one merge ("a b") per line.
  The vocabulary is implied: the 256 byte symbols, the same with the end-of-word mark ``</w>``, one
  token per merge (the first 48,894 merges, giving 49,408 tokens in all), then
  ``<|startoftext|>`` and ``<|endoftext|>``.
- A Hugging Face CLIP tokenizer folder: ``vocab.json`` (token -> id) and ``merges.txt``.

Text is cleaned exactly as OpenAI CLIP and CheXzero clean it (``ftfy.fix_text``, HTML entities
unescaped twice, whitespace runs collapsed, lower case), split into words with CLIP's pattern, and
each word is encoded as bytes mapped to printable symbols (``bytes_to_unicode``) and merged pairwise
by merge rank. The result is token for token the one of CheXzero's ``simple_tokenizer.py``; the
tests check it against ``open_clip.tokenizer`` with OpenAI's real vocabulary.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import html
import json
from collections.abc import Sequence
from pathlib import Path

import ftfy
import numpy as np
import regex

from chexretrieve.encoders.base import EncoderError

START_TOKEN = "<|startoftext|>"
END_TOKEN = "<|endoftext|>"
END_OF_WORD = "</w>"
#: OpenAI's vocabulary keeps this many merges of the .gz file (49,408 tokens in all)
OPENAI_MERGE_COUNT = 49408 - 256 * 2 - 2

#: words: the two special tokens, English contractions, runs of letters, single digits, runs of
#: anything else that is not whitespace
WORD_PATTERN = regex.compile(
    r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d"
    r"|\p{L}+|\p{N}|[^\s\p{L}\p{N}]+",
    regex.IGNORECASE,
)


#: CLIP's whitespace: the ``regex`` module's Unicode \s, as in CheXzero's ``whitespace_clean``
WHITESPACE = regex.compile(r"\s+")


@functools.cache
def bytes_to_unicode() -> dict[int, str]:
    """OpenAI's byte -> printable character table, in OpenAI's order (the vocabulary's order).

    The printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') come first and stand for themselves;
    the other 68 byte values follow in increasing order as the characters 256, 257, ... So '!' is
    vocabulary id 0, 'a' id 64 and the first non-printable byte (0) id 188.
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {value: chr(value) for value in printable}
    others = [value for value in range(256) if value not in table]
    table.update({value: chr(256 + i) for i, value in enumerate(others)})
    return table


@functools.cache
def byte_symbols() -> tuple[str, ...]:
    """The printable character of each byte value, indexed by the byte (``bytes_to_unicode``)."""
    table = bytes_to_unicode()
    return tuple(table[value] for value in range(256))


def clean_text(text: str) -> str:
    """CLIP's text cleaning: ``ftfy.fix_text``, HTML unescaped twice, whitespace runs collapsed to
    one space, ends stripped, lower case (CheXzero's ``basic_clean`` + ``whitespace_clean``)."""
    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    return WHITESPACE.sub(" ", text).strip().lower()


#: changes whenever the reader's output for the same files changes (2: OpenAI byte order, ftfy
#: cleaning and first end-of-text pooling, 2026-12-01)
TOKENIZER_REVISION = "clip-bpe-2"


class ClipBpeTokenizer:
    """Byte-level BPE with CLIP's start/end tokens; ``encode_batch`` gives padded id arrays."""

    def __init__(self, vocab: dict[str, int], merges: Sequence[tuple[str, str]], source: str):
        for special in (START_TOKEN, END_TOKEN):
            if special not in vocab:
                raise EncoderError(f"tokenizer {source}: the vocabulary has no {special} token")
        missing = [symbol for symbol in byte_symbols() if symbol + END_OF_WORD not in vocab]
        if missing:
            raise EncoderError(
                f"tokenizer {source}: {len(missing)} byte symbols (e.g. {missing[0]!r}) have no "
                f"'{END_OF_WORD}' token; this is not a CLIP byte-level BPE vocabulary"
            )
        self.vocab = dict(vocab)
        self.merge_rank = {pair: rank for rank, pair in enumerate(merges)}
        self._fingerprint: str | None = None
        self.source = source
        self.start_id = vocab[START_TOKEN]
        self.end_id = vocab[END_TOKEN]
        self.vocab_size = max(vocab.values()) + 1
        self._word_cache: dict[str, list[int]] = {}

    @property
    def fingerprint(self) -> str:
        """sha256 of what decides the token ids: this reader's revision, the vocabulary and the
        merges in rank order. Cached anchor embeddings are keyed by it, so another vocabulary file
        (or a corrected reader) never reuses vectors computed from other token ids."""
        if self._fingerprint is None:
            digest = hashlib.sha256(TOKENIZER_REVISION.encode())
            digest.update(json.dumps(sorted(self.vocab.items()), ensure_ascii=False).encode())
            digest.update(json.dumps(list(self.merge_rank), ensure_ascii=False).encode())
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    def _merge_word(self, word: str) -> list[str]:
        symbols = [byte_symbols()[b] for b in word.encode("utf-8")]
        symbols[-1] += END_OF_WORD
        while len(symbols) > 1:
            ranks = [
                self.merge_rank.get((symbols[i], symbols[i + 1]), len(self.merge_rank))
                for i in range(len(symbols) - 1)
            ]
            best = min(ranks)
            if best == len(self.merge_rank):
                break
            pair = (symbols[ranks.index(best)], symbols[ranks.index(best) + 1])
            merged: list[str] = []
            i = 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
                    merged.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        return symbols

    def _word_ids(self, word: str) -> list[int]:
        if word in (START_TOKEN, END_TOKEN):
            return [self.vocab[word]]
        cached = self._word_cache.get(word)
        if cached is None:
            try:
                cached = [self.vocab[symbol] for symbol in self._merge_word(word)]
            except KeyError as error:
                raise EncoderError(
                    f"tokenizer {self.source}: merged symbol {error.args[0]!r} is not in the "
                    "vocabulary; vocab and merges do not belong together"
                ) from error
            self._word_cache[word] = cached
        return cached

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without start/end tokens."""
        ids: list[int] = []
        for word in WORD_PATTERN.findall(clean_text(text)):
            ids.extend(self._word_ids(word))
        return ids

    def encode_batch(self, texts: Sequence[str], max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, end_positions): int64 ids padded with 0 to the longest sentence, start and end
        tokens added; a sentence longer than ``max_tokens`` is cut and ends with the end token, as
        CheXzero's training code does. ``end_positions[i]`` is where sentence i's *first* end token
        sits: the text tower pools there, as CLIP's ``text.argmax(dim=-1)`` does (the end token
        has the highest id), also when the sentence itself contains a literal ``<|endoftext|>``.
        """
        rows = []
        for text in texts:
            ids = [self.start_id, *self.encode(text)][: max_tokens - 1]
            rows.append([*ids, self.end_id])
        width = max((len(row) for row in rows), default=0)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
        ends = np.array([row.index(self.end_id) for row in rows], dtype=np.int64)
        return ids, ends


def _read_openai_merges(path: Path) -> ClipBpeTokenizer:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            lines = handle.read().split("\n")
    except (OSError, EOFError, UnicodeDecodeError) as error:
        raise EncoderError(
            f"tokenizer {path}: cannot read it as a gzip text file ({error})"
        ) from error
    merges = _parse_merges(lines[1:], path, first_line=2)[:OPENAI_MERGE_COUNT]
    symbols = list(bytes_to_unicode().values())  # OpenAI's order, not byte order
    tokens = symbols + [s + END_OF_WORD for s in symbols] + ["".join(p) for p in merges]
    tokens += [START_TOKEN, END_TOKEN]
    return ClipBpeTokenizer({token: i for i, token in enumerate(tokens)}, merges, str(path))


def _parse_merges(lines: Sequence[str], path: Path, first_line: int) -> list[tuple[str, str]]:
    merges = []
    for number, line in enumerate(lines, start=first_line):
        if not line.strip() or line.startswith("#version"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise EncoderError(f"tokenizer {path}: line {number} is not a merge 'a b': {line!r}")
        merges.append((parts[0], parts[1]))
    return merges


def _read_huggingface_folder(folder: Path) -> ClipBpeTokenizer:
    vocab_file, merges_file = folder / "vocab.json", folder / "merges.txt"
    for needed in (vocab_file, merges_file):
        if not needed.is_file():
            raise EncoderError(
                f"tokenizer folder {folder} has no {needed.name}: a Hugging Face CLIP tokenizer "
                "folder holds vocab.json and merges.txt"
            )
    try:
        vocab = json.loads(vocab_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise EncoderError(f"tokenizer {vocab_file}: not readable JSON ({error})") from error
    if not isinstance(vocab, dict):
        raise EncoderError(f"tokenizer {vocab_file}: expected a JSON object token -> id")
    lines = merges_file.read_text(encoding="utf-8").split("\n")
    return ClipBpeTokenizer(vocab, _parse_merges(lines, merges_file, first_line=1), str(folder))


def load_clip_tokenizer(path: Path | str | None) -> ClipBpeTokenizer:
    """CLIP's tokenizer from an OpenAI ``.txt.gz`` merges file or a Hugging Face tokenizer
    folder."""
    if path is None:
        raise EncoderError(
            "CheXzero needs OpenAI CLIP's BPE tokenizer and none was given: set "
            "EncoderConfig.tokenizer_path (CLI: --tokenizer) to bpe_simple_vocab_16e6.txt.gz or to "
            "a folder with vocab.json and merges.txt (e.g. a saved openai/clip-vit-base-patch32)"
        )
    path = Path(path)
    if path.is_dir():
        return _read_huggingface_folder(path)
    if path.is_file():
        return _read_openai_merges(path)
    raise EncoderError(
        f"tokenizer {path} does not exist: pass bpe_simple_vocab_16e6.txt.gz or a folder with "
        "vocab.json and merges.txt"
    )
