"""Shared fixtures for the GPU tests: a recording sink and two fake H200s."""

from __future__ import annotations

import pytest

from stress.collectors.gpu.fake import UUID_A, UUID_B, FakeCard, RecordingSink


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def two_cards() -> list[FakeCard]:
    return [FakeCard(UUID_A, "00000000:3B:00.0"), FakeCard(UUID_B, "00000000:AF:00.0")]
