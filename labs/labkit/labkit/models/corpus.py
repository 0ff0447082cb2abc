"""The synthetic training corpus of the tiny MoE: templated sentences on four topics.

Each topic has its own templates and word lists (a few words are shared, such as numbers),
so a model trained on it learns a strict grammar (greedy continuations are predictable,
which speculative decoding needs) and its router can specialise experts by topic (the
offload lab needs prompt-dependent expert popularity). Everything is generated from a
seed: ``make_corpus(seed=0)`` always returns the same paragraphs.

A template is a string of words and ``{slot}`` placeholders; ``sentence_pattern()`` turns
the whole grammar into a regular expression over space-separated words, which the tests use
to check that generated text follows the grammar.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

NUMBERS = ["two", "three", "four", "five", "six", "seven", "eight", "ten", "twelve", "twenty"]

TOPICS: dict[str, dict[str, list[str]]] = {
    "cooking": {
        "_templates": [
            "the chef {cook} the {food} in a {vessel} .",
            "add {number} spoons of {ingredient} to the {food} .",
            "the {ingredient} makes the {food} taste {taste} .",
            "bake the {food} for {number} minutes until it is {texture} .",
            "serve the {food} with {ingredient} and {ingredient} .",
            "my grandmother {cook} {food} every sunday .",
            "stir the {vessel} slowly so the {ingredient} does not burn .",
        ],
        "cook": ["fries", "boils", "roasts", "grills", "steams", "bakes"],
        "food": ["soup", "bread", "rice", "noodles", "fish", "cake", "stew", "dumplings"],
        "vessel": ["pan", "pot", "wok", "oven", "bowl"],
        "ingredient": ["garlic", "ginger", "butter", "salt", "pepper", "honey", "onion", "basil"],
        "taste": ["sweet", "salty", "spicy", "rich", "fresh"],
        "texture": ["golden", "crisp", "soft", "tender"],
    },
    "space": {
        "_templates": [
            "the {craft} orbits {planet} every {number} days .",
            "astronauts on the {craft} watched {planet} rise over the {body} .",
            "the telescope found a {adj} {body} near {planet} .",
            "{planet} has {number} moons and a {adj} {body} .",
            "the {craft} launched toward {planet} at dawn .",
            "a {adj} {body} drifts beyond the orbit of {planet} .",
            "engineers guided the {craft} past the {body} .",
        ],
        "craft": ["probe", "rocket", "station", "satellite", "lander", "capsule"],
        "planet": ["mars", "jupiter", "saturn", "venus", "neptune", "mercury"],
        "body": ["comet", "asteroid", "nebula", "crater", "ring", "galaxy"],
        "adj": ["distant", "frozen", "bright", "dusty", "ancient"],
    },
    "sports": {
        "_templates": [
            "the {team} beat the {team} by {number} points .",
            "{player} scored a {score} in the {period} .",
            "the coach told {player} to {move} faster .",
            "fans of the {team} cheered after the {score} .",
            "{player} passed the ball and the {team} won the {event} .",
            "the {team} trained for {number} hours before the {event} .",
            "the referee stopped the game in the {period} .",
        ],
        "team": ["tigers", "eagles", "sharks", "wolves", "lions", "dragons"],
        "player": ["maria", "kenji", "lucas", "amara", "chen", "olga"],
        "score": ["goal", "penalty", "header", "rebound", "free kick"],
        "period": ["first half", "second half", "final minute", "extra time"],
        "move": ["run", "pass", "defend", "shoot"],
        "event": ["final", "league", "cup", "match"],
    },
    "code": {
        "_templates": [
            "the function {func} returns a {ctype} of {ctype} .",
            "call {func} before you {verb} the {obj} .",
            "the {obj} raises an error when the {ctype} is empty .",
            "a test checks that {func} can {verb} the {obj} .",
            "we refactored {func} to {verb} the {obj} in {number} lines .",
            "the compiler warns that {func} ignores the {obj} .",
            "store the {ctype} in the {obj} and {verb} it later .",
        ],
        "func": ["parse", "render", "fetch", "encode", "merge", "sort_items"],
        "ctype": ["list", "string", "dict", "tuple", "tensor", "queue"],
        "verb": ["close", "open", "flush", "lock", "load", "save"],
        "obj": ["file", "socket", "cache", "buffer", "database", "stream"],
    },
}


@dataclass(frozen=True)
class Paragraph:
    topic: str
    text: str


def topics() -> list[str]:
    return list(TOPICS)


def _fill(template: str, words: dict[str, list[str]], rng: random.Random) -> str:
    def pick(m: re.Match[str]) -> str:
        slot = m.group(1)
        return rng.choice(NUMBERS if slot == "number" else words[slot])

    return re.sub(r"\{(\w+)\}", pick, template)


def make_sentence(topic: str, rng: random.Random) -> str:
    spec = TOPICS[topic]
    return _fill(rng.choice(spec["_templates"]), spec, rng)


def make_paragraph(
    topic: str, rng: random.Random, min_sentences: int = 3, max_sentences: int = 6
) -> Paragraph:
    n = rng.randint(min_sentences, max_sentences)
    return Paragraph(topic, " ".join(make_sentence(topic, rng) for _ in range(n)))


def make_corpus(n_paragraphs: int = 6000, seed: int = 0) -> list[Paragraph]:
    """``n_paragraphs`` single-topic paragraphs, reproducible by ``seed``.

    Topics are drawn at random for each paragraph, so the topic after a paragraph's end is
    unpredictable (a fixed order would teach the model to change topic in a fixed cycle).
    """
    rng = random.Random(seed)
    names = topics()
    return [make_paragraph(rng.choice(names), rng) for _ in range(n_paragraphs)]


def all_words() -> list[str]:
    """Every word the grammar can produce, sorted (the tokenizer's vocabulary)."""
    words: set[str] = set(NUMBERS)
    for spec in TOPICS.values():
        for key, values in spec.items():
            items = values if key != "_templates" else [re.sub(r"\{\w+\}", "", t) for t in values]
            for item in items:
                words.update(item.split())
    return sorted(words)


def _template_regex(template: str, words: dict[str, list[str]]) -> str:
    parts = []
    for tok in template.split():
        m = re.fullmatch(r"\{(\w+)\}", tok)
        if m:
            values = NUMBERS if m.group(1) == "number" else words[m.group(1)]
            parts.append("(?:" + "|".join(re.escape(v) for v in values) + ")")
        else:
            parts.append(re.escape(tok))
    return " ".join(parts)


def sentence_pattern(topic: str | None = None) -> re.Pattern[str]:
    """A regex matching exactly one grammatical sentence (of ``topic``, or of any topic)."""
    names = [topic] if topic else topics()
    alts = [_template_regex(t, TOPICS[n]) for n in names for t in TOPICS[n]["_templates"]]
    return re.compile("(?:" + "|".join(alts) + ")")


def grammatical_sentences(text: str, topic: str | None = None) -> tuple[int, int]:
    """(number of complete sentences in ``text``, how many of them follow the grammar)."""
    pat = sentence_pattern(topic)
    sentences = [s.strip() + " ." for s in text.split(" .") if s.strip()]
    if not text.rstrip().endswith("."):
        sentences = sentences[:-1]  # the last one is unfinished
    ok = sum(1 for s in sentences if pat.fullmatch(s))
    return len(sentences), ok
