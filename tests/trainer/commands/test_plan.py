"""`xlnet plan` (trainer/commands/plan.py) and the plan's check before `xlnet train` and `xlnet finetune`
build anything (trainer/commands/fit_check.py), bad input included."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import xlnet_cli
from support.bundled_data import ROTTEN
from trainer.configs.overrides import resolve_configs
from trainer.configs.training import REMAT_MODES
from trainer.planning.plan import USABLE_FRACTION, Workload

# The tiny preset made smaller still (as in tests/trainer/tasks/test_pretraining.py).
SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32",
         "train_batch_size=4", "eval_batch_size=4", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2",
         "train_steps=4", "checkpoint_every=4", "eval_every=0", "dropout=0.1"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = xlnet_cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def sets(items) -> list[str]:
    return [flag for item in items for flag in ("--set", item)]


def test_json_output_has_the_peak_the_breakdown_the_largest_micro_batches_and_the_step_time(capsys):
    code, out, _ = run(capsys, "plan", "--preset", "base", "--task", "classification", "--max-seq-length", "512",
                       "--device", "v100-16gb", "--format", "json")
    assert code == 0
    plan = json.loads(out)
    breakdown = plan["breakdown"]
    assert plan["predicted_peak_bytes"] == breakdown["total"] > 0
    for term in ("weights", "gradients", "optimizer_slots", "activations", "memory_state", "input_batch",
                 "transient"):
        assert breakdown[term] >= 0
    assert set(breakdown["activations_per_layer"]) == set(REMAT_MODES)
    assert set(plan["max_micro_batch"]) == set(REMAT_MODES)
    assert plan["max_micro_batch"]["none"] <= plan["max_micro_batch"]["attention"] <= plan["max_micro_batch"]["full"]
    assert plan["step_seconds"] > 0 and plan["mfu"] == 0.4 and plan["seq_len"] == 512
    assert plan["device_memory_bytes"] == 16 * 1024 ** 3


def test_text_output_shows_the_breakdown_fitting_settings_and_time(capsys):
    code, out, _ = run(capsys, "plan", "--preset", "large", "--device", "tpu-v3", "--replicas", "256",
                       "--set", "precision=mixed_bfloat16", "--mfu", "0.5")
    assert code == 0
    assert out.startswith("plan: 24x1024, seq 512, micro-batch 32/replica x 256 x 1 accumulation, remat none")
    for words in ("weights", "optimizer slots (AdamW m, v)", "Transformer-XL memory state", "largest transient",
                  "keeping the global batch 8192", "remat full", "assumed MFU 0.5", "tokens/s"):
        assert words in out


def test_an_unknown_device_lists_the_known_names(capsys):
    code, _, err = run(capsys, "plan", "--device", "k80")
    assert code == 2
    assert "xlnet plan: error: --device 'k80': unknown device; choose one of tpu-v3, tpu-v4" in err
    assert "a100-80gb" in err and "cpu" in err


def test_an_unreadable_device_memory_names_the_flag_with_an_example(capsys):
    code, _, err = run(capsys, "plan", "--device-memory", "16 gigs")
    assert code == 2
    assert "xlnet plan: error: --device-memory '16 gigs': unknown unit 'gigs'; expected a size such as 16GiB, " \
           "80GB or 512MiB" in err


def test_a_device_memory_without_a_unit_is_refused_not_read_as_bytes(capsys):
    # Before: planned for 16 bytes ("more than 0.0 MiB"), exit 2 with the plan of a device that holds nothing.
    code, out, err = run(capsys, "plan", "--device-memory", "16")
    assert (code, out) == (2, "")
    assert err.splitlines() == ["xlnet plan: error: --device-memory '16': a size needs a unit; expected a size such "
                                "as 16GiB, 80GB or 512MiB (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB; GiB = 2^30 "
                                "bytes, GB = 10^9)"]


def test_a_remat_value_that_is_not_one_of_the_three_names_them(capsys):
    code, _, err = run(capsys, "plan", "--set", "remat=some")
    assert code == 2
    assert "remat must be one of none, attention, full, got 'some'" in err


def test_when_nothing_fits_the_plan_says_so_with_the_numbers(capsys):
    code, out, err = run(capsys, "plan", "--preset", "large", "--device-memory", "2GiB")
    assert code == 2
    assert "largest micro-batch/replica     0" in out
    assert "xlnet plan: error: nothing fits: even a micro-batch of 2 with remat full needs" in err
    assert f"more than {2 * USABLE_FRACTION:.2f} GiB (95% of 2.00 GiB)" in err


def small_workload(*overrides: str) -> Workload:
    model, train, _ = resolve_configs("tiny", None, SMALL + list(overrides))
    return Workload(model.replace(vocab_size=8000), train)


def memory_fitting(workload: Workload, micro_batch: int, remat: str = "none") -> int:
    """A device memory in which ``micro_batch`` (with accumulation) is the largest that fits under ``remat``."""
    return int(workload.breakdown(micro_batch, remat, accumulation_steps=2).total / USABLE_FRACTION) + 1


def test_train_refuses_before_building_when_the_plan_exceeds_the_device_memory(tiny_data_dir, tmp_path, capsys):
    memory = memory_fitting(small_workload(), 2)
    code, out, err = run(capsys, "train", "--data", tiny_data_dir, "--model-dir", str(tmp_path / "model"),
                         "--preset", "tiny", "--device-memory", f"{memory}B", *sets(SMALL))
    assert code == 2
    assert "xlnet train: plan: 2x64, seq 128, micro-batch 4/replica x 1 x 1 accumulation" in out
    assert "xlnet train: error: the plan predicts a peak of" in err
    assert "more than 95% of the device's" in err and "(--device-memory)" in err
    assert "Settings that fit, keeping the global batch 4: --set remat=none --set train_batch_size=2 " \
           "--set accumulation_steps=2" in err
    assert "or --set auto_fit=true to take the cheapest" in err
    assert not (tmp_path / "model").exists()


def test_finetune_refuses_before_reading_the_data(spm_model, tmp_path, capsys):
    (tmp_path / "unread.tsv").write_text("")  # no example: reading it would be an error naming it
    code, _, err = run(capsys, "finetune", "--task", "classification", "--train", str(tmp_path / "unread.tsv"),
                       "--eval", str(ROTTEN / "dev.tsv"), "--vocab", spm_model, "--preset", "tiny",
                       "--model-dir", str(tmp_path / "model"), "--device-memory", "64MiB",
                       *sets(["n_layer=2", "train_batch_size=64", "max_seq_length=128"]))
    assert code == 2
    assert "xlnet finetune: error: the plan predicts a peak of" in err and "keeping the global batch 64" in err
    assert "unread.tsv" not in err


@pytest.mark.slow  # 19 s: two training runs
def test_auto_fit_keeps_the_global_batch_and_trains_as_the_same_settings_written_by_hand(tiny_data_dir, tmp_path,
                                                                                        capsys):
    memory = memory_fitting(small_workload(), 2)
    auto = tmp_path / "auto"
    code, out, _ = run(capsys, "train", "--data", tiny_data_dir, "--model-dir", str(auto), "--preset", "tiny",
                       "--device-memory", f"{memory}B", *sets(SMALL + ["auto_fit=true"]))
    assert code == 0
    assert "xlnet train: auto_fit: remat none, train_batch_size 2, accumulation_steps 2" in out
    saved = json.loads((auto / "train_config.json").read_text())
    assert (saved["remat"], saved["train_batch_size"], saved["accumulation_steps"]) == ("none", 2, 2)
    assert saved["train_batch_size"] * saved["accumulation_steps"] == 4
    by_hand = tmp_path / "by_hand"
    code, _, _ = run(capsys, "train", "--data", tiny_data_dir, "--model-dir", str(by_hand), "--preset", "tiny",
                     *sets(SMALL + ["train_batch_size=2", "accumulation_steps=2"]))
    assert code == 0

    def losses(model_dir: Path) -> list[float]:
        return [json.loads(line)["loss"] for line in (model_dir / "train_steps.jsonl").read_text().splitlines()]

    assert losses(auto) == pytest.approx(losses(by_hand), rel=1e-5)
    assert len(losses(auto)) == 4


def test_init_checkpoint_gives_the_architecture(tmp_path, capsys):
    from trainer.models.config import model_preset

    model = model_preset("tiny").replace(n_layer=3, d_model=96, n_head=3)
    (tmp_path / "model_config.json").write_text(json.dumps(model.to_dict()))
    code, out, _ = run(capsys, "plan", "--init-checkpoint", str(tmp_path), "--task", "squad", "--format", "json")
    assert code == 0
    plan = json.loads(out)
    assert plan["model"] == {"n_layer": 3, "d_model": 96, "vocab_size": 8000}
    assert (plan["run"], plan["seq_len"]) == ("finetune:squad", 512)


def test_max_seq_length_without_a_task_is_refused(capsys):
    code, _, err = run(capsys, "plan", "--max-seq-length", "128")
    assert code == 2 and "--max-seq-length is a fine-tuning flag: give --task too" in err


def test_a_long_document_plan_counts_the_memory_and_the_earlier_segments(capsys):
    code, out, _ = run(capsys, "plan", "--preset", "base", "--task", "classification", "--max-seq-length", "512",
                       "--set", "max_segments=8", "--set", "mem_len=512", "--set", "train_batch_size=4",
                       "--format", "json")
    assert code == 0
    plan = json.loads(out)
    assert (plan["max_segments"], plan["mem_len"]) == (8, 512)
    assert plan["breakdown"]["memory_state"] == 12 * 4 * 512 * 768 * 4  # n_layer x batch x mem_len x d_model floats
    assert plan["breakdown"]["earlier_segments"] > 0
    code, out, _ = run(capsys, "plan", "--preset", "base", "--task", "classification", "--max-seq-length", "512",
                       "--set", "train_batch_size=4", "--format", "json")
    one = json.loads(out)
    assert (one["max_segments"], one["mem_len"], one["breakdown"]["earlier_segments"]) == (1, 0, 0)
    assert one["predicted_peak_bytes"] < plan["predicted_peak_bytes"]
    # 7 forward passes and one forward and backward (3 forwards), the keys spanning the memory: (7 + 3) / 3 and more
    assert 10 / 3 * one["model_flops_per_step"] < plan["model_flops_per_step"] < 8 * one["model_flops_per_step"]
