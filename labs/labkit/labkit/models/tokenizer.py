"""A word-level tokenizer: lower-cased words and punctuation, one id each."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
_TOKEN = re.compile(r"[a-z0-9_]+|[^\sa-z0-9_]")


class WordTokenizer:
    """``encode("The chef fries the soup.") -> [ids]``; ``decode`` joins words with spaces.

    Ids 0-3 are ``<pad> <bos> <eos> <unk>``; unknown words map to ``<unk>``.
    """

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, words: Iterable[str]):
        self.vocab: list[str] = list(SPECIALS) + [w for w in words if w not in SPECIALS]
        self._index = {w: i for i, w in enumerate(self.vocab)}

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @staticmethod
    def split(text: str) -> list[str]:
        return _TOKEN.findall(text.lower())

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        ids = [self._index.get(w, self.unk_id) for w in self.split(text)]
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def decode(self, ids: Sequence[int] | Iterable[int], *, skip_special: bool = True) -> str:
        words = []
        for i in ids:
            i = int(i)
            if skip_special and i < len(SPECIALS):
                continue
            words.append(self.vocab[i] if 0 <= i < len(self.vocab) else "<unk>")
        return " ".join(words)

    def id(self, word: str) -> int:
        return self._index[word]

    def to_list(self) -> list[str]:
        return list(self.vocab)

    @classmethod
    def from_list(cls, vocab: list[str]) -> WordTokenizer:
        if vocab[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"vocabulary must start with {SPECIALS}")
        return cls(vocab[len(SPECIALS) :])
