"""Builds data/squad/wiki_qa_v2.json: hand-written SQuAD 2.0 questions over bundled Wikipedia summaries.

Each paragraph is one document of data/corpus/wiki_summaries_en.txt.gz, its sentence lines
joined by single spaces. The questions and answers below were written by hand from the
paragraph text alone; an answer is given as its exact text (and, where the text occurs more
than once, which occurrence is meant) and this script computes ``answer_start``, so the offsets
are right by construction. ``None`` marks a plausible question the paragraph does not answer
(``is_impossible``). Run from the repository root: ``python data/squad/build_wiki_qa.py``.
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent / "corpus" / "wiki_summaries_en.txt.gz"
OUTPUT = HERE / "wiki_qa_v2.json"

# (document index, title, the paragraph's first words (a check that the corpus is the bundled one),
#  [(question, answers)]) with answers None (unanswerable) or a list of text or (text, occurrence).
QUESTIONS = [
    (1, "2001: A Space Odyssey (film)", "2001: A Space Odyssey is a 1968", [
        ("Who directed 2001: A Space Odyssey?", ["Stanley Kubrick"]),
        ("In what year was 2001: A Space Odyssey released?", ["1968"]),
        ("Who co-wrote the screenplay with Kubrick?", ["Arthur C. Clarke"]),
        ("Which short story from 1951 inspired the plot?", ["The Sentinel"]),
        ("To which planet do the astronauts travel?", ["Jupiter"]),
        ("How much did the film earn at the box office?", None),
    ]),
    (8, "Acropolis of Athens", "The Acropolis of Athens is an ancient citadel", [
        ("What is the most famous building on the Acropolis of Athens?", ["the Parthenon", "Parthenon"]),
        ("What does the Greek word polis mean?", [("city", 1)]),
        ("After which legendary figure was Cecropia named?", ["Cecrops", "the legendary serpent-man Cecrops"]),
        ("In which country is the Acropolis of Athens?", ["Greece"]),
        ("By what name was the Acropolis of Athens also known in ancient times?", ["Cecropia"]),
        ("Who designed the Parthenon?", None),
    ]),
    (13, "The Adventures of Tintin", "The Adventures of Tintin is a series of 24", [
        ("Who created The Adventures of Tintin?", ["Hergé"]),
        ("How many comic albums make up the series?", ["24"]),
        ("What nationality was the creator of Tintin?", ["Belgian"]),
        ("In how many languages had Tintin been published by 2007?", ["more than 70"]),
        ("How many copies of Tintin had been sold by 2007?", ["more than 200 million"]),
        ("Which publisher first printed the Tintin albums?", None),
    ]),
    (24, "Along the River During the Qingming Festival", "Along the River During the Qingming Festival is", [
        ("Who painted Along the River During the Qingming Festival?", ["Zhang Zeduan"]),
        ("During which dynasty did the painter live?", ["Song dynasty", "Song"]),
        ("What kind of painting is Along the River During the Qingming Festival?", ["handscroll painting"]),
        ("Which capital city does the painting show?", ["Bianjing"]),
        ("What has the painting been called?", ["China's Mona Lisa"]),
        ("In which direction is the scroll read?", ["right to left"]),
        ("When did Zhang Zeduan live?", ["1085–1145"]),
    ]),
    (35, "Angkor Wat", "Angkor Wat is a Vaishnava Hindu", [
        ("In which country is Angkor Wat?", ["Cambodia"]),
        ("How large is the site of Angkor Wat?", ["162.6 hectares"]),
        ("During the reign of which king was Angkor Wat built?", ["Suryavarman II", "the Khmer king Suryavarman II"]),
        ("To which god was the Hindu temple dedicated?", ["Vishnu"]),
        ("In which direction is Angkor Wat oriented?", ["west", "toward the west"]),
        ("How many visitors come to Angkor Wat each year?", None),
    ]),
    (48, "Art Deco", "Art Deco, short for the French", [
        ("What French words is Art Deco short for?", ["Arts décoratifs"]),
        ("In which city did Art Deco first appear?", ["Paris"]),
        ("In which decade did Art Deco first appear?", ["1910s", "the 1910s"]),
        ("Which everyday objects are named as examples influenced by Art Deco?", ["radios and vacuum cleaners"]),
        ("Who is considered the founder of Art Deco?", None),
    ]),
    (70, "Bayeux Tapestry", "The Bayeux Tapestry is an embroidered cloth", [
        ("How long is the Bayeux Tapestry?", ["nearly 70 metres", "70 metres"]),
        ("In which battle do the events of the tapestry culminate?", ["the Battle of Hastings", "Battle of Hastings"]),
        ("In what year did the Norman Conquest of England take place?", ["1066"]),
        ("Who was King of England at the time of the conquest?", ["Harold II"]),
        ("Where has the tapestry been preserved for centuries?", ["Bayeux, Normandy, France", ("Bayeux", 1)]),
        ("Who embroidered the Bayeux Tapestry?", None),
    ]),
    (79, "Bohemian Rhapsody", "\"Bohemian Rhapsody\" is a song", [
        ("Which band released Bohemian Rhapsody?", ["Queen", "the British rock band Queen"]),
        ("Who wrote Bohemian Rhapsody?", ["Freddie Mercury"]),
        ("On which album did Bohemian Rhapsody appear?", ["A Night at the Opera"]),
        ("How long is Bohemian Rhapsody?", ["six-minute"]),
        ("What does the song notably lack?", ["a refraining chorus"]),
        ("How many weeks did the song spend at number one?", None),
    ]),
    (91, "Burj Khalifa", "The Burj Khalifa is a megatall skyscraper", [
        ("In which city is the Burj Khalifa?", ["Dubai"]),
        ("What is the total height of the Burj Khalifa?", ["829.8 m"]),
        ("Which firm designed the Burj Khalifa?", ["SOM", "the SOM architectural firm"]),
        ("In what year did the Burj Khalifa top out?", ["2009"]),
        ("Which building held the height record before the Burj Khalifa?", ["Taipei 101"]),
        ("How many floors does the Burj Khalifa have?", None),
    ]),
    (100, "Carmen", "Carmen is an opera in four acts", [
        ("Who composed Carmen?", ["Georges Bizet"]),
        ("Who wrote the novella on which Carmen is based?", ["Prosper Mérimée"]),
        ("When was Carmen first performed?", ["3 March 1875"]),
        ("Which company first performed Carmen?", ["the Opéra-Comique", "Opéra-Comique"]),
        ("After which performance did Bizet die?", ["the 33rd performance", "33rd"]),
        ("Which aria from act 2 is among the best known?", ["Toreador Song"]),
        ("Who wrote the libretto of Carmen?", ["Henri Meilhac and Ludovic Halévy"]),
        ("Who sang the title role at the premiere?", None),
    ]),
    (137, "Colosseum", "The Colosseum is an elliptical amphitheatre", [
        ("In which city is the Colosseum?", ["Rome"]),
        ("Under which emperor did construction of the Colosseum begin?", ["Vespasian", "the Emperor Vespasian"]),
        ("In what year was the Colosseum completed?", ["AD 80"]),
        ("Which emperor completed the Colosseum?", ["Titus"]),
        ("What did later classicists name the amphitheatre?", ["the Flavian Amphitheatre", "Flavian Amphitheatre"]),
        ("How many spectators could the Colosseum hold?", None),
    ]),
    (172, "Divine Comedy", "The Divine Comedy is an Italian narrative poem", [
        ("Who wrote the Divine Comedy?", ["Dante Alighieri"]),
        ("When was the Divine Comedy completed?", ["c. 1321"]),
        ("Which language did the poem help establish as the standardized Italian language?",
         ["the Tuscan language", "Tuscan"]),
        ("What are the three parts of the Divine Comedy?", ["Inferno, Purgatorio, and Paradiso"]),
        ("Who illustrated the first printed edition of the Divine Comedy?", None),
    ]),
    (187, "Dune (novel)", "Dune is a 1965 epic science fiction novel", [
        ("Who wrote Dune?", ["Frank Herbert"]),
        ("In which magazine was Dune first published as serials?", ["Analog", "Analog magazine"]),
        ("Which novel tied with Dune for the Hugo Award?", ["This Immortal", "Roger Zelazny's This Immortal"]),
        ("Which award did Dune win in 1966?", ["Nebula Award for Best Novel", "the inaugural Nebula Award for Best Novel"]),
        ("Who directed the film adaptation of Dune?", None),
    ]),
    (246, "Great Pyramid of Giza", "The Great Pyramid of Giza is the largest", [
        ("For which pharaoh was the Great Pyramid built as a tomb?", ["Khufu", "Egyptian Pharaoh Khufu"]),
        ("By what other name is Khufu given in the paragraph?", ["Cheops"]),
        ("When was the Great Pyramid built?", ["c. 2600 BC"]),
        ("How long did the building of the Great Pyramid take?", ["about 26 years"]),
        ("During which dynasty did Khufu rule?", ["the Fourth Dynasty", "Fourth Dynasty"]),
        ("How tall is the Great Pyramid?", None),
    ]),
    (263, "Harry Potter", "Harry Potter is a series of seven", [
        ("Who wrote the Harry Potter novels?", ["J. K. Rowling"]),
        ("How many novels are in the Harry Potter series?", ["seven"]),
        ("Which school do Harry and his friends attend?", ["Hogwarts School of Witchcraft and Wizardry", "Hogwarts"]),
        ("Which dark wizard is Harry in conflict with?", ["Lord Voldemort", "Voldemort"]),
        ("What are non-magical people called in the novels?", ["Muggles"]),
        ("In what year was the first Harry Potter novel published?", None),
    ]),
    (301, "Jane Eyre", "Jane Eyre is a novel by the English writer", [
        ("Who wrote Jane Eyre?", ["Charlotte Brontë"]),
        ("Under which pen name was Jane Eyre published?", ["Currer Bell"]),
        ("On what date was Jane Eyre first published?", ["19 October 1847"]),
        ("Who published the first American edition?", ["Harper & Brothers"]),
        ("Whom does Jane love?", ["Mr Rochester"]),
        ("Of which house is Mr Rochester the master?", ["Thornfield Hall"]),
        ("How many copies did Jane Eyre sell in its first year?", None),
    ]),
    (325, "Las Meninas", "Las Meninas is a 1656 oil painting", [
        ("Who painted Las Meninas?", ["Diego Velázquez", "Velázquez"]),
        ("In which museum is Las Meninas?", ["the Museo del Prado", "Museo del Prado"]),
        ("In what year was Las Meninas painted?", ["1656"]),
        ("In whose court was Velázquez the leading artist?", ["King Philip IV of Spain and Portugal"]),
        ("Who is the young girl at the centre of Las Meninas?", None),
    ]),
    (330, "Leaning Tower of Pisa", "The Leaning Tower of Pisa, or simply", [
        ("Of which cathedral is the Leaning Tower the bell tower?", ["Pisa Cathedral"]),
        ("What caused the tower's lean?", ["an unstable foundation"]),
        ("How large is the tower's lean?", ["nearly four-degree", "four-degree"]),
        ("How many visitors does the tower receive each year?", ["over 5 million"]),
        ("Who was the architect of the Leaning Tower of Pisa?", None),
    ]),
    (339, "The Little Prince", "The Little Prince is a novella written and illustrated", [
        ("Who wrote The Little Prince?", ["Antoine de Saint-Exupéry"]),
        ("Who published The Little Prince in the United States?", ["Reynal & Hitchcock"]),
        ("When was The Little Prince first published?", ["April 1943"]),
        ("Which regime had banned Saint-Exupéry's works?", ["the Vichy Regime", "Vichy Regime"]),
        ("Besides writing, what was Saint-Exupéry's occupation?", ["aviator"]),
        ("How many planets does the prince visit?", None),
    ]),
    (344, "Louvre", "The Louvre is a national art museum", [
        ("On which bank of the Seine is the Louvre?", ["the Right Bank", "Right Bank"]),
        ("In which arrondissement is the Louvre?", ["1st arrondissement", "1st"]),
        ("Under which king was the Louvre Palace originally built?", ["Philip II"]),
        ("In what year did Francis I make the fortress the residence of the French kings?", ["1546"]),
        ("Which ancient statue of Venus is in the Louvre?", ["Venus de Milo"]),
        ("How many visitors does the Louvre receive each year?", None),
    ]),
    (383, "Mona Lisa", "The Mona Lisa is a half-length portrait", [
        ("Who painted the Mona Lisa?", ["Leonardo da Vinci"]),
        ("What kind of portrait is the Mona Lisa?", ["half-length portrait painting", "half-length"]),
        ("Of which period is the Mona Lisa an archetypal masterpiece?", ["the Italian Renaissance", "Italian Renaissance"]),
        ("How is the subject's expression described?", ["enigmatic"]),
        ("In which museum is the Mona Lisa displayed?", None),
    ]),
    (389, "Musée d'Orsay", "The Musée d'Orsay is a museum in Paris", [
        ("On which bank of the Seine is the Musée d'Orsay?", ["the Left Bank", "Left Bank"]),
        ("Which former railway station houses the museum?", ["Gare d'Orsay", "the former Gare d'Orsay"]),
        ("When was the railway station built?", ["from 1898 to 1900", "1898 to 1900"]),
        ("In what year did the museum open?", ["1986"]),
        ("From which years does the museum's art mainly date?", ["1848 to 1914", "from 1848 to 1914"]),
        ("Who designed the Gare d'Orsay?", None),
    ]),
]


def occurrence_start(context: str, text: str, occurrence: int, where: str) -> int:
    """Character offset of the ``occurrence``-th (0-based) appearance of ``text`` in ``context``."""
    start = -1
    for _ in range(occurrence + 1):
        start = context.find(text, start + 1)
        if start < 0:
            raise SystemExit(f"{where}: {text!r} does not occur {occurrence + 1} time(s) in the paragraph")
    return start


def build(corpus: Path = CORPUS) -> dict:
    with gzip.open(corpus, "rt", encoding="utf-8") as handle:
        documents = handle.read().split("\n\n")
    articles = []
    for index, title, opening, questions in QUESTIONS:
        context = " ".join(documents[index].splitlines())
        if not context.startswith(opening):
            raise SystemExit(f"document {index} starts {context[:60]!r}, expected {opening!r}: not the bundled corpus")
        qas = []
        for number, (question, answers) in enumerate(questions):
            qid = f"wiki-{index:05d}-{number:02d}"
            spans = []
            for answer in answers or []:
                text, occurrence = answer if isinstance(answer, tuple) else (answer, 0)
                spans.append({"text": text, "answer_start": occurrence_start(context, text, occurrence, qid)})
            qas.append({"id": qid, "question": question, "answers": spans, "is_impossible": answers is None})
        articles.append({"title": title, "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "v2.0", "data": articles}


def main() -> None:
    dataset = build()
    OUTPUT.write_text(json.dumps(dataset, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    questions = [qa for article in dataset["data"] for p in article["paragraphs"] for qa in p["qas"]]
    impossible = sum(qa["is_impossible"] for qa in questions)
    print(f"{OUTPUT}: {len(dataset['data'])} paragraphs, {len(questions)} questions, {impossible} unanswerable",
          file=sys.stderr)


if __name__ == "__main__":
    main()
