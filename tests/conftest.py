"""Hypothesis profiles for every tier.

``check`` (``make check``, the edit-test loop) runs the unit and service property tests with a quarter of their
examples, and does not fail a test whose input generation is slow on a loaded machine; ``make test`` and CI run
the default profile, every example and every health check (see :func:`tests.strategies.examples`). The fuzz
tier's counts are fixed and never scaled.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

CHECK_PROFILE = "check"

settings.register_profile(CHECK_PROFILE, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
