"""TrainingConfig: the one settings object that flows through the whole app."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import tomli_w

from guitrainer.base.paths import path_key
from guitrainer.config.checks import check_all
from guitrainer.config.coerce import _check_field, _coerce, _split, field_info
from guitrainer.config.fields import SCHEMA_VERSION, ConfigError
from guitrainer.config.flow import FlowConfig
from guitrainer.config.recipes import LossConfig, NoiseConfig, ValidationConfig, recipe_errors
from guitrainer.config.sample_prompts import SamplePromptError, parse
from guitrainer.config.sections import (
    SECTIONS,
    DatasetConfig,
    ModelConfig,
    NetworkConfig,
    OptimizerConfig,
    OutputConfig,
    PrecisionConfig,
    SamplingConfig,
    ScheduleConfig,
)


@dataclass
class TrainingConfig:
    """Everything a training run needs. Build from a dict or a file with :func:`~guitrainer.config.files.config_from_dict`
    / :func:`~guitrainer.config.files.load_toml`."""

    model: ModelConfig = field(default_factory=ModelConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    flow: FlowConfig = field(default_factory=FlowConfig)
    schema_version: int = SCHEMA_VERSION

    # ------------------------------------------------------------------ access by path
    def get(self, path: str) -> Any:
        section, name = _split(path)
        return getattr(getattr(self, section), name)

    def set(self, path: str, value: Any, *, strict: bool = False) -> None:
        """Set one field by dotted path, coercing and validating it; raises ConfigError.

        ``strict``: a value from a file must already have the field's type (see :func:`_coerce`).
        """
        section, name = _split(path)
        f = field_info(path)
        coerced = _coerce(f, value, path, strict=strict)
        _check_field(f, coerced, path)
        setattr(getattr(self, section), name, coerced)

    def copy(self) -> TrainingConfig:
        return copy.deepcopy(self)

    # ------------------------------------------------------------------ validation
    def errors(self) -> list[ConfigError]:
        """Every problem, each naming its field and the allowed range."""
        out: list[ConfigError] = []
        for sname in SECTIONS:
            section = getattr(self, sname)
            for f in dataclasses.fields(section):
                path = f"{sname}.{f.name}"
                try:
                    _check_field(f, getattr(section, f.name), path)
                except ConfigError as e:
                    out.append(e)
        d, p = self.dataset, self.precision
        if d.min_bucket_resolution > d.max_bucket_resolution:
            out.append(ConfigError("dataset.min_bucket_resolution", "must not exceed `dataset.max_bucket_resolution`"))
        if d.keep_tokens and not d.shuffle_captions:
            pass  # harmless: keep_tokens only matters with shuffling
        train_paths = {path_key(f.path) for f in d.folders if f.path}
        for reg in d.regularization_folders:
            if reg.path and path_key(reg.path) in train_paths:
                out.append(
                    ConfigError("dataset.regularization_folders", f"{reg.path!r} is also a training folder; use it in one list only")
                )
        if p.cache_text_encoder_outputs and self.network.train_text_encoder:
            out.append(
                ConfigError("precision.cache_text_encoder_outputs", "cannot cache text embeddings while training the text encoder")
            )
        if p.base_weights in ("int8", "nf4"):  # bitsandbytes' layers (engine/network/quantised_storage.py)
            if p.offload_blocks > 0:
                out.append(ConfigError("precision.offload_blocks", f"cannot keep {p.base_weights} frozen weights in "
                                       "system RAM yet: set it to 0, or use `precision.base_weights` = \"fp8\""))
            if self.network.type != "lora":
                out.append(ConfigError("network.type", f"{p.base_weights} frozen weights train a plain LoRA only: "
                                       "set it to \"lora\", or use `precision.base_weights` = \"fp8\""))
        out.extend(check_all(self))
        out.extend(recipe_errors(self))
        for i, line in enumerate(q for q in self.sampling.prompts if str(q).strip()):
            try:
                parse(str(line), self.sampling, i)
            except SamplePromptError as e:
                out.append(ConfigError("sampling.prompts", f"prompt {i + 1}: {e}"))
        return out

    def validate(self) -> TrainingConfig:
        errs = self.errors()
        if errs:
            raise errs[0]
        return self

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        version = d.pop("schema_version")
        return {"schema_version": version, **d}

    def to_toml(self) -> str:
        return tomli_w.dumps(self.to_dict())

