"""stoker.types: job id validation and the job state transition table."""

from __future__ import annotations

import pytest

from stoker.errors import InvalidInput, InvalidTransition
from stoker.types import JOB_TRANSITIONS, JobState, check_transition, job_id

# job ids ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["a", "7", "job-1", "A.b_c-9", "nightly.orders_2024-01", "x" * 100, "a.b.c"],
)
def test_good_job_ids_are_returned_unchanged(value: str) -> None:
    assert job_id(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "-job",
        ".job",
        "_job",
        "a b",
        "a/b",
        "../etc",
        "a..b",
        "job:1",
        "jöb",
        "x" * 101,
        " job",
        "job ",
        "job\n",
    ],
)
def test_bad_job_ids_raise_invalid_input_naming_the_field(value: str) -> None:
    with pytest.raises(InvalidInput) as info:
        job_id(value)
    assert info.value.field == "job_id"
    assert repr(value) in info.value.message
    assert "1-100 characters of letters, digits, '.', '_' or '-'" in info.value.message
    assert str(info.value).startswith("job_id: ")


@pytest.mark.parametrize("value", [None, 42, b"job"])
def test_non_strings_are_not_job_ids(value: object) -> None:
    with pytest.raises(InvalidInput) as info:
        job_id(value)  # type: ignore[arg-type]
    assert info.value.field == "job_id"


# transition table ------------------------------------------------------------------------------

_TERMINAL = {JobState.FINISHED, JobState.CANCELED, JobState.FAILED}


def test_every_state_has_an_entry_and_targets_are_states() -> None:
    assert set(JOB_TRANSITIONS) == set(JobState)
    for targets in JOB_TRANSITIONS.values():
        assert targets <= set(JobState)


def test_terminal_flag_matches_the_terminal_states() -> None:
    assert {s for s in JobState if s.terminal} == _TERMINAL


@pytest.mark.parametrize("state", sorted(_TERMINAL))
def test_terminal_states_only_go_to_restarting(state: JobState) -> None:
    assert JOB_TRANSITIONS[state] == frozenset({JobState.RESTARTING})


def test_no_state_lists_itself() -> None:
    for state, targets in JOB_TRANSITIONS.items():
        assert state not in targets


def test_every_state_is_reachable_from_created() -> None:
    seen, todo = {JobState.CREATED}, [JobState.CREATED]
    while todo:
        for nxt in JOB_TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(JobState)


@pytest.mark.parametrize(
    ("current", "target"),
    [(current, target) for current in JobState for target in JobState],
)
def test_check_transition_follows_the_table(current: JobState, target: JobState) -> None:
    if target == current or target in JOB_TRANSITIONS[current]:
        check_transition(current, target)  # allowed: no error, no return value to check
    else:
        with pytest.raises(InvalidTransition) as info:
            check_transition(current, target)
        assert str(info.value) == f"job state {current} cannot become {target}"


def test_finished_cannot_run_again_without_restarting() -> None:
    with pytest.raises(InvalidTransition):
        check_transition(JobState.FINISHED, JobState.RUNNING)
    check_transition(JobState.FINISHED, JobState.RESTARTING)
    check_transition(JobState.RESTARTING, JobState.RUNNING)
