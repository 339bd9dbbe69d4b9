"""`--dedup lines`: C4's line dedup across the corpus (pipeline/cleaning.py, pipeline/beam_pipeline.py).

A line (compared as C4 compares lines: stripped, lower-cased) is kept in the one page of least seeded rank that
has it and dropped from every other page, a repeat within a page is dropped, and a page that lost lines is
re-checked by C4's sentence rule. It runs last, among the pages exact and near dedup kept."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pipeline.beam_pipeline import LineBuffer, LineOwners, LineRows, lines_of_kept_documents
from pipeline.cleaning import cleaning_set, drop_duplicate_lines, parse_names
from pipeline.corpus import expand_inputs
from pipeline.near_duplicates import keep_order, keep_rank, line_hash, line_hashes, line_text
from pipeline.preprocess_command import NoTrainingRecordsError, preprocess
from pipeline.preprocess_config import PreprocessConfig
from pipeline.quality_filters import too_few_sentences
from support.bundled_data import TINY_DATA, WIKI_SUMMARIES, read_corpus_documents

SEED = TINY_DATA.get("seed", 0)
BOILERPLATE = "Share this page with your friends and family today."


# ------------------------------------------------------------------------------------------ one page
def test_a_line_is_compared_as_c4_compares_it_stripped_and_lower_cased():
    assert line_text("  The Cat sat.\t") == "the cat sat."
    assert line_hash(line_text("The Cat sat.")) == line_hash(line_text(" the cat SAT. "))
    assert line_hash(line_text("The cat sat.")) != line_hash(line_text("The  cat sat."))  # inside: as written
    assert line_hash("the cat sat.", seed=1) != line_hash("the cat sat.", seed=2)


def test_a_pages_line_hashes_are_its_distinct_non_blank_lines():
    hashes = line_hashes(["One line.", "", "  ", "ONE LINE.", "Two lines."], SEED)
    assert hashes.dtype == np.uint64 and hashes.tolist() == sorted({line_hash("one line.", SEED),
                                                                     line_hash("two lines.", SEED)})


def test_a_page_loses_the_lines_another_page_keeps_and_the_repeats_of_its_own():
    page = ["First one. Then two.", "Kept elsewhere.", "", "Third here. And four.", "first one. then two."]
    reason, kept = drop_duplicate_lines(page, {line_hash("kept elsewhere.", SEED)}, SEED)
    assert reason is None and kept == ["First one. Then two.", "", "Third here. And four."]


def test_an_untouched_page_is_kept_as_it_came_whatever_its_sentences():
    page = ["One sentence only"]
    assert drop_duplicate_lines(page, {line_hash("another line", SEED)}, SEED) == (None, page)
    assert drop_duplicate_lines(page, set(), SEED)[1] is page


def test_a_page_that_lost_lines_is_removed_with_too_few_sentences_or_no_line_left():
    repeated = ["Short one.", "Short one.", "Short one."]  # three sentences as it came, one once re-checked
    assert drop_duplicate_lines(repeated, set(), SEED) == ("lines_too_few_sentences", [])
    everywhere = ["Kept elsewhere.", "", "Also elsewhere."]
    dropped = {line_hash("kept elsewhere.", SEED), line_hash("also elsewhere.", SEED)}
    assert drop_duplicate_lines(everywhere, dropped, SEED) == ("lines_all_duplicate", [])
    assert too_few_sentences(["One. Two.", "Three!"]) is False and too_few_sentences(["One. Two."]) is True


# ------------------------------------------------------------------------------------------ the owners
def rows_of(pages: dict[str, list[str]], order: list[str]) -> list[LineRows]:
    """The pages' lines as readers pack them, one pack per page, in ``order``."""
    packs = []
    for key in order:
        buffer = LineBuffer(SEED)
        file_key, _, index = key.rpartition(":")
        buffer.add(int(index), "train", int(index) % 3, key, line_hashes(pages[key], SEED))
        packs.append(buffer.pack(file_key))
    return packs


def lost_lines(output) -> dict[str, set[int]]:
    lost: dict[str, set[int]] = {}
    for (split, shard), rows in output:
        for key, shard_of, line in zip(rows.keys(), rows.column("shards").tolist(), rows.column("lines").tolist()):
            assert (split, shard) == ("train", shard_of)
            lost.setdefault(key, set()).add(line)
    return lost


PAGES = {f"f:{i}": [f"Line {i}.", "Shared by all.", *(["Shared by some."] if i % 2 else [])] for i in range(6)}


def test_the_page_of_least_rank_keeps_a_line_and_every_other_page_loses_it():
    lost = lost_lines(LineOwners(SEED).process((0, rows_of(PAGES, list(PAGES)))))
    by_rank = sorted(PAGES, key=lambda key: keep_rank(key, SEED))
    odd = [key for key in by_rank if int(key.rpartition(":")[2]) % 2]
    expected: dict[str, set[int]] = {key: {line_hash("shared by all.", SEED)} for key in by_rank[1:]}
    for key in odd[1:]:
        expected.setdefault(key, set()).add(line_hash("shared by some.", SEED))
    assert lost == expected


def test_which_page_keeps_a_line_does_not_depend_on_the_order_they_arrive_in():
    forward = lost_lines(LineOwners(SEED).process((0, rows_of(PAGES, list(PAGES)))))
    assert lost_lines(LineOwners(SEED).process((0, rows_of(PAGES, list(reversed(PAGES)))))) == forward


def test_keep_order_sorts_documents_as_keep_rank_does():
    keys = [f"file-{i % 7}.txt:{i}" for i in range(2000)]
    assert sorted(keys, key=lambda key: keep_order(key, SEED)) == sorted(keys, key=lambda key: keep_rank(key, SEED))


def test_pages_whose_keep_orders_tie_are_decided_by_their_keep_rank():
    packs = [rows._replace(ranks=np.zeros(rows.count, np.uint64).tobytes()) for rows in rows_of(PAGES, list(PAGES))]
    assert lost_lines(LineOwners(SEED).process((0, packs))) == lost_lines(
        LineOwners(SEED).process((0, rows_of(PAGES, list(PAGES)))))


def test_a_line_on_many_pages_is_kept_by_one_and_lost_by_every_other():
    buffer = LineBuffer(SEED)
    shared = line_hashes(["Share this page."], SEED)
    for index in range(50_000):
        buffer.add(index, "train", index % 4, f"crawl.jsonl:{index}", shared)
    lost = lost_lines(LineOwners(SEED).process((0, [buffer.pack("crawl.jsonl")])))
    keeper = min((f"crawl.jsonl:{index}" for index in range(50_000)), key=lambda key: keep_rank(key, SEED))
    assert len(lost) == 49_999 and keeper not in lost


def test_the_pages_exact_and_near_dedup_removed_neither_keep_nor_lose_a_line():
    packs = rows_of(PAGES, list(PAGES))
    removed = sorted(PAGES, key=lambda key: keep_rank(key, SEED))[0]  # it would have kept "shared by all."
    kept = [rows for _, rows in lines_of_kept_documents((0, {"lines": packs, "removed": [(removed,)]}), 1)]
    rows = LineRows.joined(kept).keys()
    assert removed not in rows and len(rows) == sum(len(page) for key, page in PAGES.items() if key != removed)
    lost = lost_lines(LineOwners(SEED).process((0, kept)))
    assert removed not in lost and sum(line_hash("shared by all.", SEED) in lines for lines in lost.values()) == 4


# ------------------------------------------------------------------------------------------ a whole run
def summaries(count: int) -> list[str]:
    return [" ".join(lines) for lines in read_corpus_documents(WIKI_SUMMARIES, 600)
            if len(" ".join(lines).split()) >= 30][:count]


@pytest.fixture(scope="module")
def paged_corpus(tmp_path_factory) -> dict:
    """One file of pages of several lines (a line a summary): 40 pages of three lines, every third with one
    boilerplate line; a page of lines of three pages that rank before it (it loses all); a page of one short
    line three times (removed once re-checked) and one of a long line twice; two near-duplicate pages (eight
    lines alike, a short last line each their own) whose last lines are also in two other pages, placed so that
    the copy near dedup removes ranks before the other page of its last line (a line stage blind to the
    removal would drop that line from the page that stays)."""
    texts = summaries(140)
    rank = lambda index: keep_rank(f"pages.txt:{index}", SEED)
    pages = [texts[3 * i:3 * i + 3] + ([BOILERPLATE] if i % 3 == 0 else []) for i in range(40)]
    before = [i for i in range(40) if rank(i) < rank(40)][:3]
    pages += [[pages[i][1] for i in before], ["Here we are again."] * 3, [texts[120], texts[120]]]
    shared = texts[121:129]
    near = [shared + ["The first copy ends with this line."], shared + ["The second copy ends with this line."]]
    others = [[near[k][-1], texts[130 + 2 * k], texts[131 + 2 * k]] for k in (0, 1)]
    slots = range(len(pages), len(pages) + 8)
    for a, b in ((a, b) for a in slots for b in slots if a != b):
        removed = max((a, 0), (b, 1), key=lambda place: rank(place[0]))  # the cluster keeps its least rank
        later = [i for i in slots if i not in (a, b) and rank(i) > rank(removed[0])]
        if later:
            placed = {a: near[0], b: near[1], later[0]: others[removed[1]]}
            rest = [i for i in slots if i not in placed]
            placed.update(zip(rest, [others[1 - removed[1]]] + [[texts[134 + k]] for k in range(4)]))
            pages += [placed[i] for i in slots]
            break
    assert len(before) == 3 and len(pages) == 51
    directory = tmp_path_factory.mktemp("paged")
    path = directory / "pages.txt"
    path.write_text("\n\n".join("\n".join(page) for page in pages) + "\n", encoding="utf-8")
    (file,) = expand_inputs([str(path)])
    assert file.key == "pages.txt"
    starts, line = [], 1
    for page in pages:
        starts.append(line)
        line += len(page) + 1
    return {"path": str(path), "keys": [f"{file.key}:{i}" for i in range(len(pages))], "pages": pages,
            "ids": [f"{path}:{start}" for start in starts]}


def line_run(tmp_path: Path, corpus: dict, spm_model: str, name: str, **changes):
    settings = {**TINY_DATA, "num_streams": 4, "num_shards": 2, "valid_shards": 1, **changes}
    config = PreprocessConfig(inputs=(corpus["path"],), output=str(tmp_path / name), vocab=spm_model,
                              removed=str(tmp_path / f"{name}-removed"), **settings)
    return preprocess(config, workers=1, runner_options=["--direct_running_mode=in_memory"])


def audit(directory: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(directory.glob("removed-*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines()]


def c4_line_dedup(pages: dict[str, list[str]]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """C4's rule stated plainly on whole lines: the page of least rank having a line keeps it; (the pages removed
    and why, the pages kept with their lines)."""
    owner: dict[str, str] = {}
    for key in sorted(pages, key=lambda key: (keep_rank(key, SEED), key)):
        for line in pages[key]:
            owner.setdefault(line.strip().lower(), key)
    removed, kept = {}, {}
    for key, page in pages.items():
        seen, lines = set(), []
        for line in page:
            text = line.strip().lower()
            if text and (owner[text] != key or text in seen):
                continue
            seen.add(text)
            lines.append(line)
        if lines != page and not seen:
            removed[key] = "lines_all_duplicate"
        elif lines != page and too_few_sentences(lines):
            removed[key] = "lines_too_few_sentences"
        else:
            kept[key] = lines
    return removed, kept


def test_line_dedup_drops_every_line_but_one_pages_and_removes_what_c4s_rule_removes(tmp_path, paged_corpus,
                                                                                     spm_model):
    line_run(tmp_path, paged_corpus, spm_model, "out", dedup=("exact", "near", "lines"))
    counters = json.loads((tmp_path / "out" / "manifest.json").read_text())["counters"]
    lines = audit(tmp_path / "out-removed")
    key_of = dict(zip(paged_corpus["ids"], paged_corpus["keys"]))
    gone = {key_of[line["id"]] for line in lines if line["stage"] in ("exact", "near")}
    assert Counter(line["stage"] for line in lines if line["stage"] != "lines") == {"near": 1}
    pages = dict(zip(paged_corpus["keys"], paged_corpus["pages"]))
    removed, kept = c4_line_dedup({key: page for key, page in pages.items() if key not in gone})
    assert {key_of[line["id"]]: line["reason"] for line in lines if line["stage"] == "lines"} == removed
    assert set(removed.values()) == {"lines_all_duplicate", "lines_too_few_sentences"}
    size = lambda page: len("\n".join(page).encode("utf-8"))
    assert counters["kept_documents_lines"] == len(kept) and counters["removed_documents_lines"] == len(removed)
    assert counters["kept_bytes_lines"] == sum(map(size, kept.values()))
    assert counters["removed_bytes_lines"] == sum(size(pages[key]) for key in removed)
    assert counters["duplicate_lines_removed"] == sum(len(pages[key]) - len(page) for key, page in kept.items())
    assert sum(BOILERPLATE in page for page in kept.values()) == 1
    # The copy near dedup removed ranks before the other page of its last line: blind to the removal, the line
    # stage would have dropped that line from the page that stays.
    _, blind = c4_line_dedup(pages)
    assert sum(map(size, (page for key, page in blind.items() if key not in gone))) < counters["kept_bytes_lines"]


def test_the_manifest_counts_the_line_stage_after_near_dedup(tmp_path, paged_corpus, spm_model):
    line_run(tmp_path, paged_corpus, spm_model, "out", dedup=("exact", "near", "lines"))
    written = json.loads((tmp_path / "out" / "manifest.json").read_text())
    counters = written["counters"]
    assert written["config"]["dedup"] == ["exact", "near", "lines"]
    for kind in ("documents", "bytes"):
        assert counters[f"in_{kind}_lines"] == counters[f"kept_{kind}_near"]
    assert counters["in_documents_lines"] == counters["removed_documents_lines"] + counters["kept_documents_lines"]
    dropped = counters["in_bytes_lines"] - counters["removed_bytes_lines"] - counters["kept_bytes_lines"]
    assert dropped > len(BOILERPLATE) * 12 and counters["duplicate_lines_removed"] > 12
    assert counters["kept_documents_lines"] == counters["documents"] + counters["empty_documents"]


def test_without_exact_or_near_dedup_the_lines_meet_no_removals_and_the_same_rule_holds(tmp_path, paged_corpus,
                                                                                       spm_model):
    line_run(tmp_path, paged_corpus, spm_model, "out", dedup=("lines",))
    counters = json.loads((tmp_path / "out" / "manifest.json").read_text())["counters"]
    removed, kept = c4_line_dedup(dict(zip(paged_corpus["keys"], paged_corpus["pages"])))
    assert counters["in_documents_lines"] == len(paged_corpus["pages"])
    assert (counters["removed_documents_lines"], counters["kept_documents_lines"]) == (len(removed), len(kept))
    assert counters["kept_bytes_lines"] == sum(len("\n".join(page).encode("utf-8")) for page in kept.values())


def written_files(tmp_path: Path, name: str) -> dict:
    files = [*(tmp_path / name).glob("*.tfrecord"), *(tmp_path / f"{name}-removed").glob("*.jsonl")]
    manifest = json.loads((tmp_path / name / "manifest.json").read_text())
    return {**{path.name: path.read_bytes() for path in sorted(files)},
            "counters": json.dumps(manifest["counters"], sort_keys=True)}


def test_the_buckets_change_nothing_line_dedup_writes(tmp_path, paged_corpus, spm_model, monkeypatch):
    import pipeline.beam_pipeline as beam_pipeline

    line_run(tmp_path, paged_corpus, spm_model, "one", dedup=("exact", "near", "lines"))
    monkeypatch.setattr(beam_pipeline, "BUCKET_INPUT_BYTES", 1024)
    assert beam_pipeline.dedup_buckets(Path(paged_corpus["path"]).stat().st_size) > 60
    line_run(tmp_path, paged_corpus, spm_model, "many", dedup=("exact", "near", "lines"))
    assert written_files(tmp_path, "many") == written_files(tmp_path, "one")


def test_a_run_whose_every_page_the_line_stage_removes_names_dedup_and_writes_nothing(tmp_path, spm_model):
    corpus = tmp_path / "repeats.txt"
    corpus.write_text("\n\n".join("\n".join([f"Page {i} says this once."] * 3) for i in range(8)) + "\n",
                      encoding="utf-8")
    with pytest.raises(NoTrainingRecordsError, match=r"--dedup removed every document \(lines 8 of 8 read"):
        line_run(tmp_path, {"path": str(corpus)}, spm_model, "none", dedup=("lines",))
    assert not (tmp_path / "none" / "manifest.json").exists() and not list((tmp_path / "none-removed").glob("*"))


def test_lines_runs_last_whatever_the_order_given_and_is_not_in_the_recommended_set():
    assert parse_names("--dedup", "lines,near,exact") == ("exact", "near", "lines")
    assert "lines" not in cleaning_set("recommended")["dedup"]


def written_with(tmp_path: Path, corpus: dict, spm_model: str, name: str, **run) -> dict:
    settings = {**TINY_DATA, "num_streams": 4, "num_shards": 2, "valid_shards": 1}
    config = PreprocessConfig(inputs=(corpus["path"],), output=str(tmp_path / name), vocab=spm_model,
                              removed=str(tmp_path / f"{name}-removed"), dedup=("exact", "near", "lines"), **settings)
    preprocess(config, **run)
    return written_files(tmp_path, name)


@pytest.mark.slow  # three runs with worker processes (about 60 s)
def test_line_dedup_writes_the_same_bytes_with_one_two_or_three_worker_processes(tmp_path, paged_corpus, spm_model):
    one, two, three = (written_with(tmp_path, paged_corpus, spm_model, f"w{n}", workers=n) for n in (1, 2, 3))
    assert one == two == three and '"removed_documents_lines": 0' not in one["counters"]


@pytest.mark.slow  # a Dask cluster of two workers, and the same run on FnApiRunner (about 40 s)
def test_line_dedup_on_a_dask_cluster_writes_fnapirunners_bytes_and_counters(tmp_path, paged_corpus, spm_model):
    from support.dask_cluster import DaskTestCluster

    fnapi = written_with(tmp_path, paged_corpus, spm_model, "fnapi", workers=1,
                         runner_options=["--direct_running_mode=in_memory"])
    with DaskTestCluster(2) as cluster:
        dask = written_with(tmp_path, paged_corpus, spm_model, "dask", runner="dask", workers=2,
                            dask_scheduler=cluster.address)
    assert dask == fnapi and '"duplicate_lines_removed": 0' not in fnapi["counters"]
