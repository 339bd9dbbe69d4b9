"""A generated cloze-style SQuAD set from plain paragraphs, for learnability tests of the QA head.

For each paragraph (one corpus document: its sentence lines joined by spaces) a sentence is
drawn, a span of 1 to ``max_span_words`` words (beginning and ending on a content word) is
removed from it and replaced by ``_``, and that blanked sentence is the question; the answer
is the removed span, in place in the paragraph (the paragraph is the context, unchanged). A
question is therefore answerable by finding the sentence and reading off what the blank hides:
a model that learns span extraction beats a trivial baseline (:func:`trivial_answers`, e.g.
the first word of the paragraph) on held-out paragraphs.

With ``question_words``, the question keeps only that many words on each side of the blank (a
fragment of the sentence), so that long sentences still fit ``max_query_length`` with their blank.

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
# Blanked spans begin and end on other words, as SQuAD answers (names, numbers, noun phrases)
# mostly do: an article alone is an empty answer to the official scorer, and a frequent function
# word would hand any baseline free matches.
FUNCTION_WORDS = frozenset("""
a an the and or but nor so yet of in on at to for from by with as into onto upon about over under
between through during after before than that this these those which who whom whose what when
where while it its he him his she her they them their we us our you your i me my is are was were
be been being has have had do does did not no can could will would shall should may might must
""".split())


def paragraphs(documents: Sequence[Sequence[str]], sentences: int) -> list[list[str]]:
    """Each document cut into consecutive paragraphs of ``sentences`` sentence lines (the last one
    may be shorter): short contexts that fit one window."""
    return [list(document[n:n + sentences]) for document in documents for n in range(0, len(document), sentences)]


# The short cloze of the learnability test (tests/support/test_squad_cloze.py) and of
# `benchmarks/finetune.py --task squad`: one or two blanked words, five words each side of the
# blank. In paragraphs of two sentences (the benchmark's) question and paragraph fit a 96-piece
# window; in paragraphs of one sentence (the test's) they fit a 64-piece one.
SHORT_CLOZE = dict(max_span_words=2, question_words=5)


def held_out_cloze(documents: Sequence[Sequence[str]], held_out_from: int, train_paragraphs: int,
                   eval_paragraphs: int, sentences: int = 2) -> tuple[dict, dict]:
    """(training set, eval set) of SHORT_CLOZE questions, one per paragraph of ``sentences``
    sentences: the first ``train_paragraphs`` paragraphs of ``documents[:held_out_from]`` and the
    first ``eval_paragraphs`` of ``documents[held_out_from:]``, which training never sees."""
    train = cloze_squad(paragraphs(documents[:held_out_from], sentences)[:train_paragraphs], seed=0,
                        id_prefix="train", **SHORT_CLOZE)
    held_out = cloze_squad(paragraphs(documents[held_out_from:], sentences)[:eval_paragraphs], seed=1,
                           id_prefix="dev", **SHORT_CLOZE)
    return train, held_out


def cloze_squad(documents: Sequence[Sequence[str]], seed: int, *, questions_per_document: int = 1,
                max_span_words: int = 3, impossible_fraction: float = 0.0, id_prefix: str = "cloze",
                min_sentence_words: int = 6, question_words: int | None = None) -> dict:
    """A SQuAD 2.0-format dict (``{"version", "data": [...]}``) of cloze questions.

    Args:
      documents: paragraphs as lists of sentence lines (tests/support/bundled_data.read_corpus_documents).
      seed: the whole set is a function of it.
      questions_per_document: questions drawn per paragraph (from distinct sentences while any remain).
      max_span_words: the removed span has 1..max_span_words words, uniformly.
      impossible_fraction: fraction of questions taken from another paragraph (unanswerable).
      id_prefix: question ids are ``{id_prefix}-{document}-{n}``.
      min_sentence_words: shorter sentences are never blanked (too little context to find them).
      question_words: if set, the question is the blank with at most this many words of its
        sentence on each side (None: the whole sentence).
    Returns:
      the dataset dict (``json.dump`` it to get a file ``trainer.inputs.squad.read_squad`` reads).
      Paragraphs without a usable sentence are left out.
    """
    rng = random.Random(seed)
    usable = [(index, [line.strip() for line in lines if _blankable(line, min_sentence_words)])
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
                question, _ = _blank_span(sentence, rng, max_span_words, question_words)
                if sentence in context:  # a duplicated sentence would be answerable after all
                    continue
                qas.append({"id": f"{id_prefix}-{index}-{number}", "question": question, "answers": [],
                            "is_impossible": True})
                continue
            sentence = sentences[order[number % len(order)]]
            question, (start, end) = _blank_span(sentence, rng, max_span_words, question_words)
            offset = context.find(sentence)
            qas.append({"id": f"{id_prefix}-{index}-{number}", "question": question,
                        "answers": [{"text": sentence[start:end], "answer_start": offset + start}],
                        "is_impossible": False})
        if qas:
            articles.append({"title": f"document {index}", "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "v2.0", "data": articles}


def _blankable(sentence: str, min_words: int) -> bool:
    """Whether ``sentence`` has ``min_words`` words and a word to blank (not a function word)."""
    words = [word.lower() for word in _WORD.findall(sentence)]
    return len(words) >= min_words and any(word not in FUNCTION_WORDS for word in words)


def _blank_span(sentence: str, rng: random.Random, max_span_words: int,
                question_words: int | None) -> tuple[str, tuple[int, int]]:
    """(the sentence, or its ``question_words`` words each side of the blank, with a random run of
    1..max_span_words words replaced by ``_``; the run's [start, end) characters in the sentence).
    The run begins and ends on a word outside FUNCTION_WORDS."""
    words = list(_WORD.finditer(sentence))
    content = [n for n, word in enumerate(words) if word.group().lower() not in FUNCTION_WORDS]
    first = rng.choice(content)
    last = first + rng.randint(1, max_span_words) - 1
    last = max(n for n in content if n <= last)
    start, end = words[first].start(), words[last].end()
    left, right = 0, len(sentence)
    if question_words is not None:
        before, after = first - question_words, last + 1 + question_words
        left = words[before].start() if before > 0 else 0
        right = words[after - 1].end() if after < len(words) else len(sentence)
    return sentence[left:start] + BLANK + sentence[end:right], (start, end)


def trivial_answers(dataset: dict, words: int, seed: int | None = None) -> dict[str, str]:
    """Answers that read nothing but the context: its first ``words`` words, or (with ``seed``) a
    run of ``words`` words at a seeded random place. question id -> answer text, the official
    predictions format, so that trainer.evaluation.squad_official scores them as it scores a model's."""
    rng = random.Random(seed)
    answers = {}
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            found = list(_WORD.finditer(paragraph["context"]))
            length = min(words, len(found))
            for qa in paragraph["qas"]:
                first = 0 if seed is None else rng.randrange(len(found) - length + 1)
                answers[qa["id"]] = paragraph["context"][found[first].start():found[first + length - 1].end()]
    return answers
