"""TrainingConfig: the one settings object that flows through the whole app.

The UI edits it, the VRAM estimator reads it, the trainer runs it, presets are sparse
overlays of it and the CLI loads it from TOML. Every field carries its label and help text
once, in ``dataclasses.field(metadata=...)``; the UI builds its widgets from that metadata.

Field names are public (presets and ``--set section.field=value`` use them): rename nothing
without a migration in :data:`MIGRATIONS`.

The package is split by concern; import from ``guitrainer.config`` itself:

- :mod:`~guitrainer.config.fields`: ``setting()`` metadata, :class:`ConfigError`, value helpers;
- :mod:`~guitrainer.config.sections`: one dataclass per ``[section]``;
- :mod:`~guitrainer.config.coerce`: a value as its field's type, checked against the field's metadata;
- :mod:`~guitrainer.config.training`: :class:`TrainingConfig`;
- :mod:`~guitrainer.config.checks`: checks across values (names, paths, extensions, betas, sample sizes);
- :mod:`~guitrainer.config.files`: overlays, migrations, TOML files and line numbers for messages.
"""

from __future__ import annotations

from guitrainer.config.coerce import COMMA_SPLIT_ITEMS, field_choices, field_info, field_paths, field_type
from guitrainer.config.fields import (
    SCHEMA_VERSION,
    ConfigError,
    UnknownKeyWarning,
    repeats_from_name,
    setting,
    short_repr,
)
from guitrainer.config.files import (
    MIGRATIONS,
    Migration,
    apply_overlay,
    atomic_write_text,
    config_from_dict,
    diff,
    find_line,
    find_line_top,
    load_toml,
    migrate,
    parse_toml_text,
    save_toml,
    schema_version_of,
)
from guitrainer.config.flow import FlowConfig
from guitrainer.config.recipes import LossConfig, NoiseConfig, ValidationConfig
from guitrainer.config.sections import (
    LR_FREE_OPTIMIZERS,
    OPTIMIZERS,
    PRECISIONS,
    SECTIONS,
    TARGETS,
    DatasetConfig,
    DatasetFolder,
    ModelConfig,
    NetworkConfig,
    OptimizerConfig,
    OutputConfig,
    Precision,
    PrecisionConfig,
    SamplingConfig,
    ScheduleConfig,
)
from guitrainer.config.training import TrainingConfig

__all__ = [
    "COMMA_SPLIT_ITEMS",
    "LR_FREE_OPTIMIZERS",
    "FlowConfig",
    "LossConfig",
    "NoiseConfig",
    "ValidationConfig",
    "MIGRATIONS",
    "OPTIMIZERS",
    "PRECISIONS",
    "SCHEMA_VERSION",
    "SECTIONS",
    "TARGETS",
    "ConfigError",
    "DatasetConfig",
    "DatasetFolder",
    "Migration",
    "ModelConfig",
    "NetworkConfig",
    "OptimizerConfig",
    "OutputConfig",
    "Precision",
    "PrecisionConfig",
    "SamplingConfig",
    "ScheduleConfig",
    "TrainingConfig",
    "UnknownKeyWarning",
    "apply_overlay",
    "config_from_dict",
    "atomic_write_text",
    "diff",
    "field_choices",
    "field_info",
    "field_paths",
    "field_type",
    "find_line",
    "find_line_top",
    "load_toml",
    "migrate",
    "parse_toml_text",
    "repeats_from_name",
    "save_toml",
    "schema_version_of",
    "setting",
    "short_repr",
]
