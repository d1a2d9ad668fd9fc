"""Fixtures for the service tests: the seed's tree as admission state, default settings."""

from __future__ import annotations

import pytest

from tests.builders import seed_tree
from webhook.admission.state import AdmissionState, Settings


@pytest.fixture
def state() -> AdmissionState:
    """The seed's tree (user-a, user-b -> Department-a; user-c -> Department-b), no policies."""
    return AdmissionState(tree=seed_tree())


@pytest.fixture
def settings() -> Settings:
    return Settings()
