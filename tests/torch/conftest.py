"""Tests of the torch.distributed backend "detwan" (collectives/torch): real rank processes on
this host, launched with torchrun's variables. Skipped, with the reason, when the backend is not
built (no python3-torch / libtorch-dev)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
from lab import torchrun as launch  # noqa: E402


def pytest_collection_modifyitems(config, items):
    problem = launch.extension_problem()
    if problem:
        skip = pytest.mark.skip(reason=problem)
        for item in items:
            item.add_marker(skip)
