"""``SeriesCatalog``: one id per (run, metric name), each series row written once, even after a rollback."""

from __future__ import annotations

from mlbench_tui.store.series import SeriesCatalog


def test_ids_are_stable_per_run_and_name_and_continue_after_the_stored_ones() -> None:
    catalog = SeriesCatalog([(4, "r-a", "loss"), (9, "r-b", "loss")])
    assert catalog.ids("r-a") == {"loss": 4} and catalog.names("r-b") == {9: "loss"}
    assert catalog.id("r-a", "loss") == 4 and not catalog.has_unwritten("r-a")
    lr = catalog.id("r-a", "lr")
    assert lr == 10 and catalog.id("r-a", "lr") == lr and catalog.id("r-b", "lr") == 11
    assert catalog.params("r-a", 1, [("lr", 3, None, 5.0, 0.1), ("loss", 3, 0.5, 5.0, 2.0)]) == [
        *(lr, 1, 3, None, 5.0, 0.1),
        *(4, 1, 3, 0.5, 5.0, 2.0),
    ]
    assert catalog.names("r-a") == {4: "loss", 10: "lr"} and catalog.ids("r-new") == {}


def test_a_new_series_is_taken_for_writing_once_and_again_after_a_rollback() -> None:
    catalog = SeriesCatalog()
    sid = catalog.id("r-a", "loss")
    assert catalog.has_unwritten("r-a")
    taken = catalog.take_unwritten("r-a", [sid, sid])
    assert taken == [(sid, "loss")] and not catalog.has_unwritten("r-a")
    assert catalog.take_unwritten("r-a", [sid]) == []  # the next batch does not write it again
    catalog.put_back([(sid, "r-a", "loss")])  # the transaction that wrote it rolled back
    assert catalog.take_unwritten("r-a", [sid]) == [(sid, "loss")]


def test_a_deleted_run_is_forgotten() -> None:
    catalog = SeriesCatalog([(1, "r-a", "loss")])
    catalog.id("r-a", "lr")
    catalog.forget("r-a")
    assert catalog.ids("r-a") == {} and catalog.names("r-a") == {} and not catalog.has_unwritten("r-a")
    assert catalog.id("r-a", "loss") == 3  # ids are never reused
