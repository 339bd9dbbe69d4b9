"""Resolving a run's configurations: preset -> ``--config FILE`` -> ``--set key=value`` (-> a
command's own flags), lowest to highest precedence, for pretraining (ModelConfig + TrainConfig)
and fine-tuning (ModelConfig + FinetuneConfig) alike.

A ``--config`` file is JSON ``{"model": {...}, "<scope>": {...}}`` (scope ``train`` or
``finetune``); the command reads it (any path, local or gs://) and hands its value here as a
:class:`ConfigFile`. A ``--set`` key is ``model.NAME``, ``<scope>.NAME`` or a bare NAME that exists
in exactly one of the two configurations. Every error is a ValueError naming the flag.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping

from tfrecords.errors import UsageError, did_you_mean
from trainer.configs.training import TrainConfig, train_preset
from trainer.models.config import JsonConfig, ModelConfig, field_types, model_preset, type_problems


@dataclasses.dataclass(frozen=True)
class ConfigFile:
    """The JSON value of a ``--config`` file and where it was read from (named in errors)."""

    values: Any
    source: str


# What a value that does not convert to the field's type should have been, in words.
_EXPECTED = {int: "an integer", float: "a number"}


def _convert(text: str, kind: Any, key: str) -> Any:
    """``text`` as a value of the field type ``kind`` (bool, int, float or str), or a UsageError
    naming the --set item and what was expected."""
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise UsageError(f"--set {key}={text}: expected true or false")
    if kind not in (int, float, str):
        raise UsageError(f"--set {key}={text}: this field cannot be set with --set; use --config")
    try:
        value = kind(text)
    except ValueError:
        raise UsageError(f"--set {key}={text}: expected {_EXPECTED[kind]}") from None
    if kind is float and not math.isfinite(value):
        raise UsageError(f"--set {key}={text}: expected a finite number")
    return value


def parse_overrides(items: Iterable[str], config_class: type = None,
                    scope_name: str = "train") -> tuple[dict[str, Any], dict[str, Any]]:
    """Parses ``--set`` items into (model changes, changes of ``config_class``), typed by the
    dataclass fields. ``config_class`` (TrainConfig by default) is addressed as
    ``<scope_name>.NAME``; either configuration's fields may also be given as a bare NAME."""
    model_changes, other_changes, _ = parse_override_items(items, config_class, scope_name)
    return model_changes, other_changes


def parse_override_items(items: Iterable[str], config_class: type = None, scope_name: str = "train"
                         ) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """:func:`parse_overrides`, and the ``--set`` item that set each field (to name it in errors)."""
    config_class = config_class or TrainConfig
    model_types, other_types = field_types(ModelConfig), field_types(config_class)
    origins: dict[str, str] = {}
    kind = config_class.__name__
    model_changes: dict[str, Any] = {}
    other_changes: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        scope, _, name = key.strip().rpartition(".")
        if scope == "model" or (not scope and name in model_types and name not in other_types):
            if name not in model_types:
                raise _unknown_key(key, f"ModelConfig has no field {name!r}", model_types, other_types, scope_name)
            model_changes[name] = _convert(value, model_types[name], key)
            origins[f"model.{name}"] = f"--set {item.strip()}"
        elif scope == scope_name or (not scope and name in other_types and name not in model_types):
            if name not in other_types:
                raise _unknown_key(key, f"{kind} has no field {name!r}", model_types, other_types, scope_name)
            flags = getattr(config_class, "FLAG_ONLY", {}).get(name)
            if flags:
                raise UsageError(f"--set {key}: {name} is set with {flags}, not --set")
            other_changes[name] = _convert(value, other_types[name], key)
            origins[f"{scope_name}.{name}"] = f"--set {item.strip()}"
        elif not scope and name in model_types and name in other_types:
            raise UsageError(f"--set {key}: ambiguous, write model.{name} or {scope_name}.{name}")
        else:
            raise _unknown_key(key, f"no such field in ModelConfig or {kind} (use model.NAME or {scope_name}.NAME)",
                               model_types, other_types, scope_name)
    return model_changes, other_changes, origins


def _unknown_key(key: str, problem: str, model_fields: Iterable[str], other_fields: Iterable[str],
                 scope_name: str) -> UsageError:
    """The error for a ``--set`` key no configuration has, with the nearest field names of either
    configuration, scoped (``model.NAME``) when the key was."""
    key = key.strip()
    scope, _, name = key.rpartition(".")
    model_fields = list(model_fields)
    # Names only: a shared "model." would make every model field look close to "model.anything".
    suggestion = did_you_mean(name, [*model_fields, *other_fields],
                              lambda field: f"{'model' if field in model_fields else scope_name}.{field}" if scope
                              else field)
    return UsageError(f"--set {key}: {problem}{f'; {suggestion}' if suggestion else ''}")


def config_file_sections(values: Any, source: str, scope_name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (model, ``scope_name``) sections of a ``--config`` file's JSON value ``{"model": {...},
    "<scope_name>": {...}}``; ``source`` names the file in errors."""
    if not isinstance(values, dict) or set(values) - {"model", scope_name}:
        raise UsageError(f"--config {source}: expected a JSON object with keys 'model' and/or '{scope_name}'")
    sections = dict(values.get("model", {})), dict(values.get(scope_name, {}))
    for name, section in zip(("model", scope_name), sections):
        if not isinstance(section, dict):
            raise UsageError(f"--config {source}: {name!r} must be a JSON object")
    return sections


def check_config_file_section(section: Mapping[str, Any], config_class: type, source: str, name: str) -> None:
    """UsageError naming the ``--config`` file, ``<name>.FIELD``, the value and the expected type for
    every key of ``section`` that ``config_class`` has no field for or whose value is not of its type."""
    unknown = sorted(set(section) - set(field_types(config_class)))
    if unknown:
        raise UsageError(f"--config {source}: {config_class.__name__} has no field "
                         f"{', '.join(f'{name}.{key}' for key in unknown)}")
    problems = type_problems(config_class, section)
    if problems:
        raise UsageError(f"--config {source}: " + "; ".join(f"{name}.{problem}" for problem in problems))


def resolve_model_and(model: ModelConfig, other: JsonConfig, config_file: ConfigFile | None,
                      overrides: Iterable[str], scope_name: str, changes: Mapping[str, Any] | None = None
                      ) -> tuple[ModelConfig, Any, set[str]]:
    """Applies a ``--config`` file, then ``--set`` items, then a command's own flags (``changes`` to
    the second config) over a model config and a second config (TrainConfig or FinetuneConfig,
    addressed as ``scope_name``); returns both and the model keys set explicitly. Each
    configuration is validated once, whole."""
    model_values, other_values = model.to_dict(), other.to_dict()
    explicit: set[str] = set()
    model_origins: dict[str, str] = {}
    other_origins: dict[str, str] = {}
    if config_file is not None:
        file_model, file_other = config_file_sections(config_file.values, config_file.source, scope_name)
        check_config_file_section(file_model, ModelConfig, config_file.source, "model")
        check_config_file_section(file_other, type(other), config_file.source, scope_name)
        model_values.update(file_model)
        other_values.update(file_other)
        explicit |= set(file_model)
        model_origins.update((name, f"--config {config_file.source}") for name in file_model)
        other_origins.update((name, f"--config {config_file.source}") for name in file_other)
    set_model, set_other, set_origins = parse_override_items(overrides, type(other), scope_name)
    model_values.update(set_model)
    other_values.update({**set_other, **(changes or {})})
    explicit |= set(set_model)
    model_origins.update((name, set_origins[f"model.{name}"]) for name in set_model)
    other_origins.update((name, set_origins[f"{scope_name}.{name}"]) for name in set_other)
    for name in changes or {}:
        other_origins.pop(name, None)  # the command's own flag set it last
    return (ModelConfig.from_dict(model_values, model_origins), type(other).from_dict(other_values, other_origins),
            explicit)


def resolve_configs(preset: str, config_file: ConfigFile | None = None, overrides: Iterable[str] = (),
                    base_model: ModelConfig | None = None) -> tuple[ModelConfig, TrainConfig, set[str]]:
    """Resolves preset -> config file -> overrides into (ModelConfig, TrainConfig, explicit model keys).

    ``base_model`` (for example the config of an --init-checkpoint) replaces the model preset.
    The returned key set names the model fields the user set explicitly, so a caller can tell
    a deliberate value from a preset default (the vocabulary size, for instance).
    """
    model, train, explicit = resolve_model_and(base_model or model_preset(preset), train_preset(preset),
                                               config_file, overrides, "train")
    train.check_model(model)
    return model, train, explicit
