from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    stateful_step_count=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(scope="session", autouse=True)
def _own_runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # `ringmq serve` announces where it listens in the user's runtime directory and the CLI
    # reads it (ringmq.announce): the brokers and CLI runs of a test session use their own,
    # so they never find the tester's broker nor leave theirs for the tester's `ringmq`.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_RUNTIME_DIR", str(tmp_path_factory.mktemp("xdg-runtime")))
        mp.delenv("RINGMQ_URL", raising=False)
        mp.delenv("RINGMQ_DATA_DIR", raising=False)
        yield
