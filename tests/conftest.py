"""Shared pytest configuration."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("default")


@pytest.fixture(scope="session", autouse=True)
def torch_caches_in_pytest_temp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Importing ``torch.distributed.pipelining`` makes torch's inductor create ``torchinductor_<user>`` in the
    temporary folder (its cache directory): here it goes under pytest's own temporary folder, so the suite leaves no
    folder behind."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("torchinductor")))
