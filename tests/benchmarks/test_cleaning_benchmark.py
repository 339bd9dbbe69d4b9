"""benchmarks/cleaning.py's smoke run: a line per Jaccard band, per timed part, per Jaccard band of the pairs run
through the pipeline, the pipeline's times, then the settings, consistent."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_cleaning_benchmark_prints_each_band_each_part_and_its_settings():
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cleaning.py"), "--documents", "20",
                             "--edits", "0.01", "0.4", "--repeats", "1", "--pipeline-documents", "30"], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    bands, timed, piped, (pipeline,), (settings,) = rows[:7], rows[7:11], rows[11:18], rows[18:19], rows[19:]
    assert sum(row["pairs"] for row in bands) == 40 and all(row["part"] == "near_duplicates" for row in bands)
    assert bands[0]["caught"] == 1.0 and bands[-1]["caught"] in (0.0, None)
    assert [row["part"] for row in timed] == ["minhash_signature", "gopher", "c4", "fineweb"]
    assert all(row["documents_per_s"] > 0 and row["documents"] == 20 for row in timed)
    assert sum(row["pairs"] for row in piped) == 30 and all(row["part"] == "pipeline_near_duplicates" for row in piped)
    assert piped[0]["caught"] == 1.0 and piped[-1]["caught"] == 0.0
    assert pipeline["documents"] == 60 and pipeline["removed"] == 15 and pipeline["near_s"] > 0
    assert settings == {"part": "settings", "documents": 20, "edits": [0.01, 0.4], "shingle_words": 5, "bands": 14,
                        "rows": 8, "min_jaccard": 0.7, "repeats": 1, "pipeline_documents": 30, "peer": None}


def test_the_cleaning_benchmark_refuses_impossible_flags_in_one_line():
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cleaning.py"), "--edits", "1.5"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].endswith(
        "--documents and --repeats must be positive, --edits in [0, 1)")
