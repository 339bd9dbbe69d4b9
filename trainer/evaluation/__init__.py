"""Scoring: classification and regression metrics, SQuAD answers and the official SQuAD evaluation."""
