"""The roofline tests pin hand-derived arithmetic of the uncalibrated model: serving
calibrations are off for the whole session (module-scoped fixtures and CLI subprocesses
included) unless a test turns them on (``calibrations_on``)."""

import os

import pytest

os.environ["KVPLAN_CALIBRATIONS"] = "off"


@pytest.fixture
def calibrations_on(monkeypatch):
    monkeypatch.delenv("KVPLAN_CALIBRATIONS", raising=False)
