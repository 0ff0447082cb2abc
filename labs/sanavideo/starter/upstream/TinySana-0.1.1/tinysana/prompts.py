"""The prompt language TinySana was trained on: "a <colour> <shape> moving <direction>"."""

from __future__ import annotations

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (230, 40, 40),
    "green": (40, 200, 60),
    "blue": (50, 90, 240),
    "yellow": (240, 220, 40),
}
SHAPES = ("circle", "square", "triangle")
DIRECTIONS: dict[str, tuple[int, int]] = {  # (dx, dy) in image coordinates (y grows downwards)
    "left": (-1, 0),
    "right": (1, 0),
    "up": (0, -1),
    "down": (0, 1),
}

PAD, BOS, UNK = 0, 1, 2
WORDS = ["<pad>", "<bos>", "<unk>", "a", "moving", *COLOURS, *SHAPES, *DIRECTIONS]
MAX_TOKENS = 8


def tokenize(prompt: str) -> list[int]:
    """BOS, then one id per known word (unknown words map to <unk>), padded to MAX_TOKENS."""
    ids = [BOS]
    for word in prompt.lower().replace(",", " ").split():
        ids.append(WORDS.index(word) if word in WORDS else UNK)
    ids = ids[:MAX_TOKENS]
    return ids + [PAD] * (MAX_TOKENS - len(ids))


def parse(prompt: str) -> tuple[str, str, str]:
    """(colour, shape, direction) named in a prompt; raises ValueError if one is missing."""
    words = prompt.lower().replace(",", " ").split()
    found = []
    for vocab in (COLOURS, SHAPES, DIRECTIONS):
        hits = [w for w in words if w in vocab]
        if not hits:
            raise ValueError(f"prompt {prompt!r} names no {['colour', 'shape', 'direction'][len(found)]}")
        found.append(hits[0])
    return found[0], found[1], found[2]


def all_prompts() -> list[str]:
    return [f"a {c} {s} moving {d}" for c in COLOURS for s in SHAPES for d in DIRECTIONS]
