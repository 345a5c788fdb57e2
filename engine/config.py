"""Quarry's one settings object: environment variables with the ``QUARRY_`` prefix.

``DATABASE_URL`` (also accepted as ``QUARRY_DATABASE_URL``) points at an external
Postgres; without it Quarry boots its embedded Postgres in ``QUARRY_HOME``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import platformdirs
from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_home() -> Path:
    return Path(platformdirs.user_data_dir("quarry", appauthor=False))


class Settings(BaseSettings):
    """Runtime configuration. Every field maps to ``QUARRY_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="QUARRY_", extra="ignore", frozen=True)

    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("QUARRY_DATABASE_URL", "DATABASE_URL")
    )
    home: Path = Field(default_factory=_default_home)
    model_cache: Path | None = None  # default: <home>/models
    pool_min_size: int = Field(default=1, ge=0)
    pool_max_size: int = Field(default=8, ge=1)
    statement_timeout_ms: int = Field(default=15_000, ge=100)
    max_file_bytes: int = Field(default=2_000_000, ge=1_000)
    rrf_k: int = Field(default=60, ge=1)

    @property
    def model_dir(self) -> Path:
        return self.model_cache if self.model_cache is not None else self.home / "models"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read from the environment once."""
    return Settings()
