"""Fault tests share one fixture: a cluster of their own (Redis, API app, workers), torn down after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.cluster import Cluster


@pytest.fixture
def cluster(tmp_path) -> Iterator[Cluster]:
    """A cluster with its own Redis, torn down after the test."""
    c = Cluster.start(tmp_path)
    yield c
    c.stop()
