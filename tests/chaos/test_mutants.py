"""The planted bugs of the mutation runs (tests/chaos/mutants/) still apply to the code: a
patch that no longer applies would make ``python -m tests.chaos mutants`` test nothing. Cheap
(``git apply --check``, no Spark); the runs themselves are long: docs/reliability.md."""

from __future__ import annotations

import shutil

import pytest

from tests.chaos.mutation import applies, kinds_of, names, patch_of
from tests.chaos.schedule import WEIGHTS

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def test_there_are_mutants_and_each_says_what_it_breaks() -> None:
    assert len(names()) >= 5
    for name in names():
        head = patch_of(name).read_text().split("\ndiff --git", 1)[0]
        assert head.startswith(f"Mutant {name}:"), name
        assert "Caught by:" in head, name
        assert set(kinds_of(name).split(",")) <= set(WEIGHTS), name


@pytest.mark.parametrize("name", names())
def test_a_mutant_still_applies_to_the_working_tree(name: str) -> None:
    ok, why = applies(name)
    assert ok, f"tests/chaos/mutants/{name}.patch no longer applies: {why}"
