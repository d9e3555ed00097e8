"""stoker.types: job id validation, the state transition tables and their one checker."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from stoker.errors import InvalidInput, InvalidTransition
from stoker.store.fleet_records import RESCALES
from stoker.types import (
    ATTEMPTS,
    CLUSTERS,
    CONTROLS,
    EPOCHS,
    JOB_TRANSITIONS,
    JOBS,
    TXNS,
    AttemptState,
    ClusterKind,
    ClusterState,
    ControlStatus,
    EpochState,
    JobState,
    SpecKind,
    StateMachine,
    TxnState,
    given_config,
    job_id,
)

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
        JOBS.check(current, target)  # allowed: no error, no return value to check
    else:
        with pytest.raises(InvalidTransition) as info:
            JOBS.check(current, target)
        assert str(info.value) == f"job state {current} cannot become {target}"


def test_finished_cannot_run_again_without_restarting() -> None:
    with pytest.raises(InvalidTransition):
        JOBS.check(JobState.FINISHED, JobState.RUNNING)
    JOBS.check(JobState.FINISHED, JobState.RESTARTING)
    JOBS.check(JobState.RESTARTING, JobState.RUNNING)


# One checker for every state machine ------------------------------------------------------------
MACHINES = [
    (JOBS, JobState, False),
    (ATTEMPTS, AttemptState, True),
    (EPOCHS, EpochState, True),
    (TXNS, TxnState, True),
    (CONTROLS, ControlStatus, True),
    (CLUSTERS, ClusterState, False),
    (RESCALES, ("decided", "in_use", "failed", "superseded", "observed", "recorded"), False),
]


@pytest.mark.parametrize(("machine", "states", "born"), MACHINES)
def test_each_machine_checks_every_move_by_its_table_and_its_one_stay_rule(
    machine: StateMachine[Any], states: Iterable[Any], born: bool
) -> None:
    sources: list[Any] = [*states, None] if born else list(states)
    for current in sources:
        for target in states:
            listed = target in machine.moves.get(current, frozenset())
            expected = listed or (machine.stay and target == current)
            assert machine.allows(current, target) == expected, (machine.subject, current, target)
            if expected:
                machine.check(current, target)
            else:
                with pytest.raises(InvalidTransition, match=rf"{machine.subject} .* cannot become"):
                    machine.check(current, target)


@pytest.mark.parametrize(("machine", "states", "born"), MACHINES[:6])
def test_every_state_has_a_row(machine: StateMachine[Any], states: Any, born: bool) -> None:
    assert set(machine.moves) == set(states) | ({None} if born else set())


def test_the_stay_rule_is_the_machines_own() -> None:
    # Staying is a no-op for records that change other fields in place ...
    assert JOBS.stay and CLUSTERS.stay and RESCALES.stay
    assert JOBS.allows(JobState.CANCELING, JobState.CANCELING)
    assert RESCALES.allows("observed", "observed")  # a status without a row stays
    assert not RESCALES.allows("observed", "in_use")
    # ... and a move of its own elsewhere, allowed only where the table lists it.
    assert not ATTEMPTS.allows(AttemptState.RUNNING, AttemptState.RUNNING)  # a second claim
    assert not CONTROLS.allows(ControlStatus.APPLIED, ControlStatus.APPLIED)
    assert not EPOCHS.allows(EpochState.DECIDED, EpochState.DECIDED)
    assert EPOCHS.allows(EpochState.COMMITTED, EpochState.COMMITTED)  # recovery repeats it
    assert all(TXNS.allows(s, s) for s in TxnState)  # idempotent prepare, commit, abort


def test_the_message_names_the_machine_and_a_missing_record() -> None:
    with pytest.raises(InvalidTransition, match=r"^attempt without a record cannot become FAILED$"):
        ATTEMPTS.check(None, AttemptState.FAILED)
    with pytest.raises(InvalidTransition, match=r"^job state FINISHED cannot become RUNNING$"):
        JOBS.check(JobState.FINISHED, JobState.RUNNING)


def test_the_kinds_are_the_strings_stored_and_answered() -> None:
    import json

    assert [str(k) for k in SpecKind] == ["app", "in_app", "application"]
    assert [str(k) for k in ClusterKind] == ["app", "session"]
    # A spec made with the enum is stored and compared as the same JSON as before.
    spec = {"kind": SpecKind.MANAGED, "entrypoint": "/a.py"}
    assert json.dumps(spec) == '{"kind": "app", "entrypoint": "/a.py"}'
    assert json.loads(json.dumps(spec)) == spec
    assert SpecKind.MANAGED == ClusterKind.APP == "app"  # equal strings, two meanings


def test_given_config_reads_both_stored_layouts() -> None:
    managed = {"kind": "app", "entrypoint": "/a.py", "config": {"min": 20}}
    local = {"name": "p", "config": {"min": 10, "max": 5}, "submitted_config": {"min": 20}}
    in_app = {"kind": "in_app", "app_id": "a", "config": {"min": 10}}
    assert given_config(managed) == {"min": 20}
    assert given_config(local) == {"min": 20}  # not the declared defaults under "config"
    assert given_config(in_app) == {}
    assert given_config({"kind": "app", "entrypoint": "/a.py"}) == {}
