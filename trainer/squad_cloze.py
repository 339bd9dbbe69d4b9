"""A generated cloze-style SQuAD set from plain paragraphs, for learnability tests of the QA head.

For each paragraph (one corpus document: its sentence lines joined by spaces) a sentence is
drawn, a span of 1 to ``max_span_words`` words is removed from it and replaced by ``_``, and that
blanked sentence is the question; the answer is the removed span, in place in the paragraph (the
paragraph is the context, unchanged). A question is therefore answerable by finding the sentence
and reading off what the blank hides: a model that learns span extraction beats a trivial
baseline (e.g. "the first word of the paragraph") on held-out paragraphs.

With ``impossible_fraction`` > 0, that fraction of questions instead blank a sentence of ANOTHER
paragraph, marked ``is_impossible`` (SQuAD 2.0). Everything is a pure function of the seed.
"""
from __future__ import annotations

import random
import re
from typing import Sequence

# A word: letters or digits, optionally joined by inner apostrophes, hyphens or dots (3.5, U.S).
_WORD = re.compile(r"[^\W_]+(?:['\-.][^\W_]+)*")
BLANK = "_"


def cloze_squad(documents: Sequence[Sequence[str]], seed: int, *, questions_per_document: int = 1,
                max_span_words: int = 3, impossible_fraction: float = 0.0, id_prefix: str = "cloze",
                min_sentence_words: int = 6) -> dict:
    """A SQuAD 2.0-format dict (``{"version", "data": [...]}``) of cloze questions.

    Args:
      documents: paragraphs as lists of sentence lines (tests/conftest.read_corpus_documents).
      seed: the whole set is a function of it.
      questions_per_document: questions drawn per paragraph (from distinct sentences while any remain).
      max_span_words: the removed span has 1..max_span_words words, uniformly.
      impossible_fraction: fraction of questions taken from another paragraph (unanswerable).
      id_prefix: question ids are ``{id_prefix}-{document}-{n}``.
      min_sentence_words: shorter sentences are never blanked (too little context to find them).
    Returns:
      the dataset dict (``json.dump`` it to get a file ``trainer.squad_data.read_squad`` reads).
      Paragraphs without a usable sentence are left out.
    """
    rng = random.Random(seed)
    usable = [(index, [line.strip() for line in lines if len(_WORD.findall(line)) >= min_sentence_words])
              for index, lines in enumerate(documents)]
    usable = [(index, sentences) for index, sentences in usable if sentences]
    articles = []
    for position, (index, sentences) in enumerate(usable):
        context = " ".join(line.strip() for line in documents[index] if line.strip())
        qas = []
        order = rng.sample(range(len(sentences)), len(sentences))
        for number in range(questions_per_document):
            if len(usable) > 1 and rng.random() < impossible_fraction:
                other = rng.randrange(len(usable) - 1)
                sentence = rng.choice(usable[other + (other >= position)][1])
                question, _ = _blank_span(sentence, rng, max_span_words)
                if sentence in context:  # a duplicated sentence would be answerable after all
                    continue
                qas.append({"id": f"{id_prefix}-{index}-{number}", "question": question, "answers": [],
                            "is_impossible": True})
                continue
            sentence = sentences[order[number % len(order)]]
            question, (start, end) = _blank_span(sentence, rng, max_span_words)
            offset = context.find(sentence)
            qas.append({"id": f"{id_prefix}-{index}-{number}", "question": question,
                        "answers": [{"text": sentence[start:end], "answer_start": offset + start}],
                        "is_impossible": False})
        if qas:
            articles.append({"title": f"document {index}", "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "v2.0", "data": articles}


def _blank_span(sentence: str, rng: random.Random, max_span_words: int) -> tuple[str, tuple[int, int]]:
    """(the sentence with a random run of 1..max_span_words words replaced by ``_``, the run's
    [start, end) characters in the sentence)."""
    words = list(_WORD.finditer(sentence))
    length = rng.randint(1, min(max_span_words, len(words)))
    first = rng.randrange(len(words) - length + 1)
    start, end = words[first].start(), words[first + length - 1].end()
    return sentence[:start] + BLANK + sentence[end:], (start, end)
