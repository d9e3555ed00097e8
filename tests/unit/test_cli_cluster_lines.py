"""Issue 23 item 7: a cluster's status counts the workers its master says are alive; a worker
removed stays in the master's list as DEAD for a while and showed as a third worker beside
the cluster's own two."""

from __future__ import annotations

from stoker.cli.clusters import master_line


def test_the_master_line_counts_live_workers_and_names_the_gone() -> None:
    status = {
        "workers": [
            {"state": "ALIVE", "cores": 1, "coresused": 1},
            {"state": "ALIVE", "cores": 1, "coresused": 0},
            {"state": "DEAD", "cores": 1, "coresused": 0},
        ]
    }
    assert master_line(status) == (
        "2 workers alive, cores 1/2 used (1 gone, still listed by the master)"
    )
    assert master_line({"workers": status["workers"][:2]}) == "2 workers alive, cores 1/2 used"
    assert master_line({}) == "0 workers alive, cores 0/0 used"
