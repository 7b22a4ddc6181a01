"""Shared fixtures: the golden folder beside the repository."""

from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[3] / "shared" / "golden"


@pytest.fixture
def golden() -> Path:
    if not (GOLDEN / "check.py").exists():
        pytest.skip(f"golden cases not found at {GOLDEN}")
    return GOLDEN
