"""The benchmark scripts run end to end and print the JSON lines they document.

Every script of benchmarks/ has a smoke test here (bundled_data.py is their shared helper): run as a
user runs it (`python benchmarks/X.py` with its smallest settings, the peer off), exit status 0, JSON
lines with the expected keys and consistent figures. All are slow (`make test-slow`): each runs the
real pipeline or trainer, tens of seconds at least. The figures themselves are measurements
(README); these tests check that the scripts keep producing them consistently.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_benchmark(script: str, *args: str) -> list[dict]:
    """The JSON lines a benchmark script prints (its exit status must be 0)."""
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def finetune_workdir(tmp_path_factory, spm_model) -> Path:
    """One --workdir for both fine-tuning benchmarks: the bundled corpus is preprocessed and pretrained
    on once (finetune.py reuses a finished run there), with the session's vocabulary copied in. Its
    ``bundled`` folder is the --workdir of memory_benefit.py (at seq_len 128 rather than its 32: 1.5
    CPU s more in its runs, 8 less than a preprocessing of its own), memory.py, remat_step_cost.py,
    train.py and checkpoints.py too: the same record shapes (seq_len 128), so that preprocessing the
    whole corpus (about 9 CPU s, 15 to 30 s on a loaded 2-core machine) is done once for the seven, and
    no vocabulary is trained (8 CPU s). They share one xdist group (SHARES_FINETUNE_WORKDIR): on two
    workers each would build its own copy, the pretraining run included."""
    workdir = tmp_path_factory.mktemp("finetune-bench")
    (workdir / "bundled").mkdir()
    shutil.copy(spm_model, workdir / "bundled" / "spiece.model")  # no vocabulary training
    return workdir


SHARES_FINETUNE_WORKDIR = pytest.mark.xdist_group("finetune_workdir")


@pytest.mark.slow  # about 25 CPU s at one layer (45 at four, preprocessing its own corpus): compiling dominates
@SHARES_FINETUNE_WORKDIR  # the bundled corpus at seq_len 128, preprocessed once for the group (not at 32 for this one)
def test_memory_benefit_reports_both_runs_by_position_and_their_difference(finetune_workdir):
    memory, without, summary = run_benchmark("memory_benefit.py", "--workdir", str(finetune_workdir / "bundled"),
                                             "--seq-len", "128", "--reuse-len", "64", "--num-predict", "21",
                                             "--steps", "4", "--seeds", "0", "--eval-steps", "3", "--set", "n_layer=1")

    assert (memory["mem_len"], without["mem_len"]) == (32, 0)
    assert memory["steps"] == without["steps"] == 4
    assert memory["valid"]["targets"] == 3 * 16 * 21  # eval batches x rows x num_predict
    assert sum(memory["valid"]["targets_by_position"].values()) == memory["valid"]["targets"]
    assert list(memory["valid"]["loss_by_position"]) == ["0-2", "2-4", "4-8", "8-64", "64-128"]
    assert "valid_same_weights_without_memory" in memory and "valid_same_weights_without_memory" not in without
    assert summary["per_seed"]["0"]["difference"] == round(without["valid"]["loss"] - memory["valid"]["loss"], 4)
    assert summary["memory_helps_every_seed"] == (summary["per_seed"]["0"]["difference"] > 0)


@pytest.mark.slow
def test_preprocess_benchmark_reports_capacity_both_runners_set_ups_and_their_speed_ups(spm_model):
    # The first 1,500 lines of each corpus file: FnApiRunner and a local Dask cluster, 1 and 2 worker processes each.
    capacity, *runs, summary = run_benchmark("preprocess.py", "--vocab", spm_model, "--repeats", "1",
                                             "--capacity-seconds", "0.2", "--lines", "1500")

    assert capacity["benchmark"] == "machine_parallel_capacity" and capacity["encodes_2_processes"] > 0
    assert [(run["runner"], run["workers"]) for run in runs] == [
        ("FnApiRunner", 1), ("FnApiRunner", 2), ("DaskRunner", 1), ("DaskRunner", 2)]
    assert len({(run["corpus_tokens"], run["records"]) for run in runs}) == 1
    assert runs[0]["corpus_text_bytes"] == summary["corpus_text_bytes"] and summary["lines"] == 1500
    for run in runs:  # CPU seconds by one rule for both runners: the launcher's plus each worker process's
        assert run["cpu_seconds"] == pytest.approx(run["runner_cpu_seconds"] + run["workers_cpu_seconds"], abs=0.011)
        assert len(run["per_worker_cpu_seconds"]) == run["workers"]
        assert sum(run["shards_per_worker"]) == 32 + 2
    for prefix, one, two in (("", runs[0], runs[1]), ("dask_", runs[2], runs[3])):
        speedup = round(one["seconds"] / two["seconds"], 2)
        assert summary[f"{prefix}speedup_1_to_2_per_repeat"] == [speedup]
        assert summary[f"{prefix}speedup_over_capacity_per_repeat"] == [round(speedup / capacity["capacity_2_vs_1"], 2)]
        assert summary[f"{prefix}speedup_over_goal"] == round(speedup / summary[f"{prefix}speedup_goal"], 2)


@pytest.mark.slow  # about 25 CPU s at one layer (56 at four): preprocessing, pretraining, two `xlnet finetune`
@SHARES_FINETUNE_WORKDIR
def test_finetune_benchmark_reports_random_and_pretrained_runs_with_the_same_settings(finetune_workdir):
    # one layer (the pretraining run's and both fine-tunes'): each of the 3 processes traces every layer
    random, pretrained = run_benchmark("finetune.py", "--workdir", str(finetune_workdir), "--pretrain-steps", "0",
                                       "4", "--finetune-steps", "4", "--set", "n_layer=1")

    assert (random["init"], random["pretrain_steps"]) == ("random", 0)
    assert (pretrained["init"], pretrained["pretrain_steps"]) == ("pretrained", 4)
    assert random["finetune_steps"] == pretrained["finetune_steps"] == 4 and random["seed"] == pretrained["seed"]
    assert pretrained["pretrain_valid_loss"] > 0 and random["pretrain_valid_loss"] is None
    for line in (random, pretrained):
        assert set(line["dev"]) == {"accuracy", "macro_f1", "mcc", "loss"} and 0 <= line["dev"]["accuracy"] <= 1


@pytest.mark.slow  # about 13 CPU s at one layer (24 at four): the workdir's pretraining reused, two `xlnet finetune`
@SHARES_FINETUNE_WORKDIR
def test_squad_benchmark_reports_trivial_baselines_then_random_and_pretrained_runs(finetune_workdir):
    # 4 steps of batch 32 read 128 questions: 200 training paragraphs are more than the runs see, and the
    # benchmark's 20000 (generated, written, read and cut into windows twice) cost the test about 40 s
    *baselines, random, pretrained = run_benchmark("finetune.py", "--task", "squad", "--workdir",
                                                   str(finetune_workdir), "--pretrain-steps", "0", "4",
                                                   "--finetune-steps", "4", "--train-paragraphs", "200",
                                                   "--set", "n_layer=1")  # as the pretraining run it reuses

    assert [line["baseline"] for line in baselines] == ["first 1 word", "random 1 word", "first 2 words",
                                                        "random 2 words"]
    assert all(0 <= line["dev"]["f1"] < 15 and line["data"].startswith("cloze QA") and "200 train" in line["data"]
               for line in baselines)
    assert (random["init"], pretrained["init"]) == ("random", "pretrained")
    for line in (random, pretrained):
        assert line["task"] == "squad" and set(line["dev"]) == {"exact", "f1"} and line["finetune_steps"] == 4
        assert line["dev_curve"] == {"4": line["dev"]}


@pytest.mark.slow  # about 17 CPU s at one layer (32 at four): two measured runs, each a process of its own
@SHARES_FINETUNE_WORKDIR  # the bundled corpus at seq_len 128, preprocessed once (no vocabulary trained either)
def test_memory_reports_each_remat_modes_step_cost_against_none_of_the_same_round(finetune_workdir):
    """One round (its rows then carry no round number): the median over rounds is remat_step_cost.py's
    test below (three rounds)."""
    rows = run_benchmark("memory.py", "--cases", "tiny", "--batches", "8", "--modes", "none", "full",
                         "--timed-steps", "2", "--rounds", "1", "--no-table", "--set", "n_layer=1", "--workdir",
                         str(finetune_workdir / "bundled"))
    lines, (summary,) = rows[:2], rows[2:]
    assert [(row.get("round"), row["remat"]) for row in lines] == [(None, "none"), (None, "full")]
    assert all(row["timed_steps"] == 2 and row["measured_peak_bytes"] > 0 and row["n_layer"] == 1 for row in lines)
    ratio = lines[1]["step_s"] / lines[0]["step_s"]
    assert summary["remat"] == "full" and summary["ratios"] == [round(ratio, 3)]
    assert summary["rounds"] == 1 and summary["ratio_to_none_median"] == round(ratio, 3)


@pytest.mark.slow  # about 12 CPU s at one layer (32 at four): none and full, both traced in one process
@SHARES_FINETUNE_WORKDIR  # the bundled corpus at seq_len 128, preprocessed once (no vocabulary trained either)
def test_remat_step_cost_times_every_mode_in_each_round_and_divides_by_none_of_that_round(finetune_workdir):
    rows = run_benchmark("remat_step_cost.py", "--case", "tiny", "--batch", "8", "--modes", "full",
                         "--rounds", "3", "--set", "n_layer=1", "--workdir", str(finetune_workdir / "bundled"))
    rounds, (summary,) = rows[:3], rows[3:]
    assert [row["round"] for row in rounds] == [0, 1, 2]
    assert all(list(row["step_s"]) == ["none", "full"] and min(row["step_s"].values()) > 0 for row in rounds)
    ratios = [row["step_s"]["full"] / row["step_s"]["none"] for row in rounds]
    assert summary["remat"] == "full" and summary["ratios"] == [round(r, 3) for r in ratios]
    assert summary["ratio_to_none_median"] == round(sorted(ratios)[1], 3)


@pytest.mark.slow  # about 24 CPU s: the peer's shapes (6 layers, d_model 512), one warm-up and one timed step, no peer
def test_train_step_times_query_rows_and_one_mode_of_ours_without_the_peer():
    targets, all_positions, ours = run_benchmark("train_step.py", "--modes", "fp32:eager", "--no-peer",
                                                 "--steps", "1", "--warmup", "1")

    assert [(row["measure"], row["rows"]) for row in (targets, all_positions)] == [
        ("query_stream_attention_fwd_bwd_one_layer", "targets"),
        ("query_stream_attention_fwd_bwd_one_layer", "all_positions")]
    assert targets["ms"] > 0 and all_positions["ms"] > 0
    assert (ours["impl"], ours["precision"], ours["jit"]) == ("ours", "fp32", False)
    assert (ours["n_layer"], ours["d_model"], ours["seq_len"], ours["batch"]) == (6, 512, 256, 8)
    assert ours["step_s"] > 0 and ours["loss"] > 0 and 0 < ours["mfu"] <= 1
    # The peak is the best of two timings, before and after the steps; the MFU divides by it, or by
    # the step's own rate where that is higher (never an MFU above 1).
    assert len(ours["peak_timings_gflops"]) == 2 and ours["matmul_peak_gflops"] == max(ours["peak_timings_gflops"])
    assert ours["mfu_peak_gflops"] == max(ours["matmul_peak_gflops"], ours["achieved_gflops"])
    assert ours["peak_source"].startswith("measured_matmul_peak (float32, 2048 x 2048, best of 6) before and after")
    assert ours["tokens_per_s"] == pytest.approx(8 * 256 / ours["step_s"], rel=1e-3)
    assert "speedup_vs_peer_raw" not in ours  # the peer is off


@pytest.mark.slow  # the fine-tuning benchmarks' bundled corpus, preprocessed once, then one step per loop
@SHARES_FINETUNE_WORKDIR
def test_train_benchmark_reports_the_loop_the_bare_step_and_the_reader_of_the_tiny_shape(finetune_workdir):
    rows = run_benchmark("train.py", "--shapes", "tiny", "--steps", "1", "--repeats", "1", "--set", "n_layer=1",
                         "--workdir", str(finetune_workdir / "bundled"))

    assert [row["benchmark"] for row in rows] == ["matmul_peak", "train_loop", "bare_train_step",
                                                  "input_pipeline", "reader_overhead"]
    peak, loop, bare, reader, overhead = rows
    assert all(row["shape"] == "tiny" for row in rows)
    assert peak["flops_per_sec"] > 0 and loop["tokens_per_sec"] > 0 and bare["tokens_per_sec"] > 0
    assert (loop["seq_len"], loop["steps"], loop["repeats"], loop["n_layer"]) == (128, 1, 1, 1)
    assert reader["examples_per_sec"] > 0
    assert overhead["reader_cost"] < 1 and overhead["input_headroom"] > 0


def write_tiny_model_dir(path: Path, spm_model: str, **overrides) -> Path:
    """A model directory holding the tiny preset (with ``overrides`` of its fields) with random (seeded)
    weights, as `xlnet export` reads one."""
    import sentencepiece as spm
    import tensorflow as tf

    from pipeline.vocab import load_vocab
    from trainer.models.config import model_preset
    from trainer.models.network import build_network

    path.mkdir(parents=True)
    shutil.copy(spm_model, path / "spiece.model")
    (path / "special_ids.json").write_text(json.dumps(load_vocab(spm_model).special_ids.to_dict()))
    config = model_preset("tiny").replace(vocab_size=spm.SentencePieceProcessor(model_file=spm_model).vocab_size(),
                                        **overrides)
    (path / "model_config.json").write_text(json.dumps(config.to_dict()))
    tf.keras.utils.set_random_seed(1)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=build_network(config)), str(path / "checkpoints"), 1).save()
    return path


@pytest.fixture(scope="module")
def long_texts_exports(tmp_path_factory, spm_model) -> tuple[Path, list[dict]]:
    """One run of serving_long_texts.py (its --workdir and JSON lines): the model directory in its
    --workdir (the tiny preset with one layer and mem_len 16, written here: the script reuses one it
    finds there, and every layer an export traces costs a second or more), exported with one segment
    and with four (`xlnet export --max-length 16`), both timed. Its one-segment export is the serving
    benchmark's too: an export costs a process 15 to 20 CPU seconds (TensorFlow's import, tracing every
    signature). Both tests share one xdist group (SHARES_TINY_EXPORTS), so that the run is made once."""
    workdir = tmp_path_factory.mktemp("serving-long-texts")
    write_tiny_model_dir(workdir / "model", spm_model, n_layer=1, mem_len=16)
    rows = run_benchmark("serving_long_texts.py", "--vocab", spm_model, "--workdir", str(workdir), "--max-length",
                         "16", "--max-segments", "4", "--batch-size", "4", "--repeats", "2")
    return workdir, rows


SHARES_TINY_EXPORTS = pytest.mark.xdist_group("tiny_exports")


@pytest.mark.slow  # serving_long_texts.py's one-segment `xlnet export` of the tiny preset, two timed batches each
@SHARES_TINY_EXPORTS
def test_serving_benchmark_times_each_signature_and_python_sentencepiece_on_one_batch_size(long_texts_exports):
    workdir, _ = long_texts_exports
    rows = run_benchmark("serving.py", "--export-dir", str(workdir / "serving-1" / "1"), "--batch-size", "4",
                         "--repeats", "2")

    assert [row["signature"] for row in rows] == ["encode", "encode_text", "predict_masked", "python_sentencepiece"]
    for row in rows:
        assert (row["benchmark"], row["batch_size"], row["max_length"], row["d_model"]) == ("serving", 4, 16, 128)
        assert row["median_batch_seconds"] > 0
        # batch / median, each rounded (seconds to 5 decimals, sentences to 1): python_sentencepiece's
        # median of about 0.0002 s is 1% off 4 / sentences_per_second by its rounding alone
        seconds = row["median_batch_seconds"]
        assert 4 / (seconds + 5e-6) - 0.05 <= row["sentences_per_second"] <= 4 / (seconds - 5e-6) + 0.05


@pytest.mark.slow  # about 9 CPU s at one layer (17 at four): two tiny rounds on the shared bundled corpus
@SHARES_FINETUNE_WORKDIR
def test_checkpoints_benchmark_reports_each_rounds_costs_and_the_median_of_each_mode(finetune_workdir):
    rows = run_benchmark("checkpoints.py", "--preset", "tiny", "--seq-len", "128", "--rounds", "2", "--every", "2",
                         "--set", "n_layer=1", "--workdir", str(finetune_workdir / "bundled"))

    modes = ["snapshot_held", "sync", "async_nice0", "async_nice19"]
    rounds, summaries, (verdict,) = rows[:2], rows[2:6], rows[6:]
    assert [row["round"] for row in rounds] == [0, 1]
    for row in rounds:
        for mode in modes:
            line = row[mode]
            assert line["cost_s"] == pytest.approx(line["save_call_s"] + line["loop_after_s"] - row["baseline_loop_s"]
                                                   + line["wait_s"], abs=0.003)
            assert line["save_call_s"] > 0 and line["wait_s"] >= 0
        for mode in modes[2:]:
            assert row[mode]["write_s"] > 0 and row[mode]["writer_thread_cpu_s"] > 0
    assert [row["mode"] for row in summaries] == modes
    for summary in summaries:
        mode = summary["mode"]
        assert (summary["preset"], summary["n_layer"], summary["seq_len"], summary["every"]) == ("tiny", 1, 128, 2)
        assert summary["checkpoint_bytes"] > 10_000_000  # one tiny layer and the 8000-row embedding, with AdamW's slots
        for key, cost in (("checkpoint_cost_s", "cost_s"), ("checkpoint_cost_cpu_s", "cost_cpu_s")):
            assert summary[key] == pytest.approx(sum(row[mode][cost] for row in rounds) / 2, abs=0.002)
        assert summary["step_s_with_checkpoints"] == pytest.approx(
            summary["baseline_step_s"] + summary["checkpoint_cost_s"] / 2, abs=0.002)
    sync = summaries[1]
    assert verdict["goal"] == 0.1
    for summary in summaries[2:]:
        for key, unit in (("checkpoint_cost_s", "cost"), ("checkpoint_cost_cpu_s", "cpu")):
            expected = round(summary[key] / sync[key], 3) if sync[key] > 0 else None
            assert verdict[f"{summary['mode']}_over_sync_{unit}"] == expected


@pytest.mark.slow  # about 35 CPU s at one layer (61 at four): two `xlnet finetune`, four children
def test_long_documents_reports_each_n_the_training_step_the_reading_cost_and_the_goals(tmp_path, spm_model):
    # one layer, here and in the cost parts (--cost-n-layer): every process traces each layer of its model
    # (about 4 CPU s of a fine-tuning run for the tiny preset's other 3)
    model_dir = write_tiny_model_dir(tmp_path / "model", spm_model, n_layer=1)
    (tmp_path / "work" / "bundled").mkdir(parents=True)  # the cost parts' vocabulary: none is trained
    shutil.copy(spm_model, tmp_path / "work" / "bundled" / "spiece.model")
    task, one, two, step_one, step_two, recurrence, one_pass, goals = run_benchmark(
        "long_documents.py", "--pretrained", str(model_dir), "--workdir", str(tmp_path / "work"), "--segments", "1",
        "2", "--segment-length", "16", "--train-documents", "16", "--dev-documents", "8", "--steps", "2",
        "--steps-per-loop", "1", "--batch", "4", "--cost-preset", "tiny", "--cost-n-layer", "1", "--base-length", "16",
        "--timed-steps", "1", "--repeats", "1", "--read-segments", "4")

    assert (task["part"], task["passage_pieces"], task["train"]["documents"], task["dev"]["documents"]) == \
           ("task", 14, 16, 8)
    assert task["train"]["pieces_max"] <= 8 * 16 - 2  # 8 passages fill 8 segments, <sep> <cls> last
    assert [(row["part"], row["max_segments"], row["mem_len"]) for row in (one, two, step_one, step_two)] == [
        ("accuracy", 1, 0), ("accuracy", 2, 16), ("training_step", 1, 0), ("training_step", 2, 16)]
    assert one["truncated"][0] == "16 of 16 train examples are longer than max_seq_length 16 and are truncated"
    assert step_one["n_layer"] == step_two["n_layer"] == recurrence["n_layer"] == one_pass["n_layer"] == 1
    for row in (one, two, step_one, step_two):
        assert row["step_s"] > 0 and row["measured_peak_bytes"] > 0 and row["predicted_peak_bytes"] > 0
    assert all(0 <= row["dev"]["accuracy"] <= 1 and row["steps"] == 2 for row in (one, two))
    assert [(row["mode"], row["segments"], row["pieces"]) for row in (recurrence, one_pass)] == [
        ("recurrence", 4, 64), ("one_pass", 1, 64)]
    assert goals["accuracy_gain_points"]["value"] == round(100 * (two["dev"]["accuracy"] - one["dev"]["accuracy"]), 2)
    assert goals["read_speedup"]["value"] == round(one_pass["seconds"] / recurrence["seconds"], 3)
    assert goals["training_step_peak_ratio"]["value"] == round(
        step_two["measured_peak_bytes"] / step_one["measured_peak_bytes"], 3)


@pytest.mark.slow  # two exports of the tiny preset (one segment, four), then two timed batches of each run
@SHARES_TINY_EXPORTS
def test_serving_long_texts_benchmark_times_each_fill_of_the_segments(long_texts_exports):
    _, rows = long_texts_exports

    assert [(row["export_segments"], row["text_segments"]) for row in rows] == [(1, 1.0), (4, 1.0), (4, 2.0),
                                                                                 (4, 4.0)]
    for row in rows:
        assert (row["benchmark"], row["max_length"], row["batch_size"]) == ("serving_long_texts", 16, 4)
        assert row["seconds_per_text_segment"] == pytest.approx(row["median_batch_seconds"] / row["text_segments"],
                                                                rel=0.01)


@pytest.mark.slow  # about 11 CPU s: one tiny layer, two batch sizes (each with its floor), two scoring lengths, no peer
def test_generation_benchmark_times_cached_uncached_generation_and_scoring_by_length():
    # one layer: the cached loop, its steps and each uncached length are traced per batch, layer by layer
    settings, *rows = run_benchmark("generation.py", "--preset", "tiny", "--n-layer", "1", "--prompt-len", "16",
                                    "--new-tokens", "8", "--batches", "1", "2", "--score-lengths", "64", "128",
                                    "--segment-len", "32", "--score-mem", "32", "--no-peer")

    assert (settings["kind"], settings["mem_len"], settings["n_layer"]) == ("settings", 16 + 8, 1)
    (floor,) = [row for row in rows if row["kind"] == "weight_floor"]
    assert floor["ms"] > 0 and floor["in_turn_ms"] > 0
    assert floor["gib_per_sec"] == pytest.approx(floor["weight_mib"] / 1024 / floor["ms"] * 1000)
    generation = [row for row in rows if row["kind"] == "generation"]
    assert [row["batch"] for row in generation] == [1, 2]
    for row in generation:
        assert set(row["cached"]["token_ms"]) == {"1", "8"} and "peer" not in row
        in_turn = floor["in_turn_ms"]
        assert row["token_32_over_weight_floor"] == pytest.approx(row["cached"]["token_ms"]["8"] / in_turn)
        assert row["cached"]["tokens_per_sec"] == pytest.approx(row["batch"] * 8 / row["cached"]["seconds"])
        assert row["cached_over_uncached"] == pytest.approx(row["uncached"]["seconds"] / row["cached"]["seconds"])
        bound = row["floor"]
        assert bound["weights_ms"] > 0 and bound["weights_in_turn_ms"] > 0 and bound["cache_ms"] > 0
        assert bound["prompt_seconds"] == row["cached"]["prompt_seconds"] > 0
        assert bound["step_ms"] == pytest.approx(bound["weights_ms"] + bound["cache_ms"])
        assert bound["seconds"] == pytest.approx(bound["prompt_seconds"] + 7 * bound["step_ms"] / 1000)
        assert row["bound_over_uncached"] == pytest.approx(row["uncached"]["seconds"] / bound["seconds"])
        assert row["token_32_over_floor_step"] == pytest.approx(row["cached"]["token_ms"]["8"] / bound["step_ms"])
    scoring = [row for row in rows if row["kind"] == "scoring"]
    assert [row["tokens"] for row in scoring] == [64, 128]
    assert all(row["memory_seconds"] > 0 and row["sliding_seconds"] > 0 for row in scoring)
    assert rows[-1]["kind"] == "scoring_linearity" and rows[-1]["length_ratio"] == 2.0


@pytest.mark.slow  # one tiny `xlnet train` of 2 steps, about 40 s on a quiet 2-core machine
def test_startup_crash_loop_reports_each_start_and_the_count_of_crashes(small_data_dir):
    *starts, summary = run_benchmark("startup_crash_loop.py", "--starts", "1", "--data", small_data_dir)

    assert starts == [{"start": 0, "exit": 0, "seconds": starts[0]["seconds"], "crash": False}]
    assert (summary["starts"], summary["crashes"], summary["exits"]) == (1, 0, {"0": 1})
