# ruff: noqa: SIM905  (word lists read best as one string each)
"""Topic text for the toy model: a word-level vocabulary and a seeded sentence generator.

Eight topics, each with its own words, plus common words shared by all. A prompt is mostly
about one topic, so the experts it needs depend on what it is about: the property that makes
"learn the hot set from this prompt's prefill" beat "always keep the first K experts".
``make_prompt(topic, n_tokens, seed)`` is deterministic for a given seed.
"""

from __future__ import annotations

import random

TOPICS: dict[str, list[str]] = {
    "cooking": "soup bread rice noodles fish cake stew dumplings garlic ginger butter salt pepper honey "
    "onion basil pan pot wok oven bowl chef fry boil roast grill steam bake stir recipe".split(),
    "space": "probe rocket station satellite lander capsule mars jupiter saturn venus neptune mercury "
    "comet asteroid nebula crater ring galaxy orbit launch telescope astronaut moon star "
    "gravity planet solar rover cosmos eclipse".split(),
    "football": "team coach player goal striker keeper defender midfield pitch referee penalty corner "
    "match league season stadium fans score header tackle whistle cup final derby "
    "kickoff offside captain transfer trophy foul".split(),
    "medicine": "doctor nurse patient fever vaccine virus clinic hospital surgery dose tablet symptom "
    "diagnosis therapy pulse blood heart lung kidney infection antibiotic scan ward "
    "recovery allergy bandage injection cough pharmacy wound".split(),
    "finance": "bank loan interest bond stock market price profit budget tax invoice credit debt "
    "dividend fund asset capital inflation currency exchange shares investor audit "
    "revenue salary pension mortgage broker ledger deposit".split(),
    "music": "guitar piano violin drum melody rhythm chord song singer choir concert album "
    "orchestra tempo harmony note scale bass flute trumpet lyric verse chorus opera "
    "studio tune band jazz encore microphone".split(),
    "computing": "compiler kernel memory cache thread process server network packet router "
    "database query index tensor matrix graph stream buffer bytes register "
    "pointer function loop branch debugger socket cluster scheduler driver binary".split(),
    "weather": "rain snow wind storm cloud thunder lightning fog frost hail breeze humidity "
    "forecast temperature pressure monsoon drought flood typhoon sunshine drizzle "
    "rainbow season climate gust blizzard heatwave dew mist".split(),
}

COMMON = (
    "the a an of to in on at by for with from into over under after before during while and or "
    "but so because then when where which that this these those it its they them their we our "
    "you your he she his her is are was were be been has have had will would can could should "
    "may might must very more most some many much few every each other new old big small good "
    "bad first last next early late fast slow today again always never often also just only "
    "still even here there now"
).split()

NUMBERS = "one two three four five six seven eight nine ten twelve twenty".split()
SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>", "."]


def vocabulary(size: int) -> list[str]:
    """Every word of the toy vocabulary, in id order, padded with unused slots to ``size``."""
    words = list(SPECIAL) + COMMON + NUMBERS
    for topic_words in TOPICS.values():
        words += topic_words
    if len(words) > size:
        raise ValueError(f"vocabulary needs {len(words)} ids but the model has {size}")
    return words + [f"<unused{i}>" for i in range(size - len(words))]


def topic_of_word(vocab: list[str]) -> list[int]:
    """Topic index of every vocabulary id, -1 for common words, numbers and specials."""
    index = {w: t for t, ws in enumerate(TOPICS.values()) for w in ws}
    return [index.get(w, -1) for w in vocab]


class Tokenizer:
    """Word-level: splits on spaces; unknown words map to ``<unk>``."""

    def __init__(self, vocab: list[str]):
        self.vocab = vocab
        self.ids = {w: i for i, w in enumerate(vocab)}
        self.bos = self.ids["<bos>"]

    def encode(self, text: str, bos: bool = True) -> list[int]:
        unk = self.ids["<unk>"]
        ids = [self.ids.get(w, unk) for w in text.split()]
        return [self.bos, *ids] if bos else ids

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.vocab[i] for i in ids if i != self.bos)


def make_text(topic: str, n_words: int, seed: int, purity: float = 0.85) -> str:
    """About ``n_words`` words of sentences mostly about ``topic`` (``purity`` of topic words)."""
    rng = random.Random(f"{topic}/{seed}")
    others = [t for t in TOPICS if t != topic]
    words: list[str] = []
    while len(words) < n_words:
        for _ in range(rng.randint(5, 11)):
            if rng.random() < 0.45:
                words.append(rng.choice(COMMON))
            elif rng.random() < 0.08:
                words.append(rng.choice(NUMBERS))
            else:
                t = topic if rng.random() < purity else rng.choice(others)
                words.append(rng.choice(TOPICS[t]))
        words.append(".")
    return " ".join(words[:n_words])


def make_prompt(topic: str, n_tokens: int, seed: int) -> str:
    """A prompt of ``n_tokens`` tokens once encoded with ``<bos>``."""
    return make_text(topic, n_tokens - 1, seed)
