"""The job page's back pressure, judged over the newest epochs with rates rather than one: one
epoch's rates swing (the epoch after a pause "offers" its whole gap)."""

from __future__ import annotations

from stoker.server.ui.dashboard import falling_behind
from stoker.store import EpochRecord
from stoker.types import AttemptNo, ControlVersion, Epoch, EpochState, JobId


def epoch(n: int, offered: float | None, processed: float, backlog: int | None) -> EpochRecord:
    progress = None
    if offered is not None:
        progress = {"inputRowsPerSecond": offered, "processedRowsPerSecond": processed}
    return EpochRecord(
        JobId("j"),
        Epoch(n),
        ControlVersion(0),
        EpochState.COMMITTED,
        AttemptNo(1),
        AttemptNo(1),
        10,
        False,
        0.0,
        0.0,
        0.0,
        backlog=backlog,
        progress=progress,
    )


def newest_first(*rates: tuple[float | None, float, int | None]) -> list[EpochRecord]:
    return [epoch(100 - i, o, p, b) for i, (o, p, b) in enumerate(rates)]


def test_one_epoch_that_offered_more_is_not_falling_behind() -> None:
    # The newest epoch came after a pause: it offered its whole gap. The others kept up.
    assert falling_behind(newest_first((900, 100, None), *[(90, 100, None)] * 5)) is False


def test_most_epochs_offering_more_with_a_backlog_not_shrinking_is_behind() -> None:
    assert falling_behind(newest_first(*[(200, 100, None)] * 4, (90, 100, None))) is True
    growing = [(200, 100, 5000), (200, 100, 4000), (200, 100, 3000), (200, 100, 2000)]
    assert falling_behind(newest_first(*growing)) is True
    # Offered more, but the backlog shrinks over them: catching up, not behind.
    shrinking = list(reversed(growing))
    assert falling_behind(newest_first(*shrinking)) is False


def test_too_few_epochs_with_rates_judge_nothing() -> None:
    assert falling_behind(newest_first((200, 100, None), (None, 0, None), (200, 100, None))) is None
    assert falling_behind([]) is None
