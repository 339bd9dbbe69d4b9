"""TEMPORARY (issue 28): the old name of trainer/evaluation/squad_postprocessing.py, until
trainer/commands/finetune.py imports that module; then this file goes."""
from trainer.evaluation.squad_postprocessing import evaluate_predictions, no_answer_scores, predictions_json  # noqa: F401
