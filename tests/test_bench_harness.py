"""``benchmarks/_harness.py``: the timer counts its repeats and not its warm-ups, a row's
ratio is measured / baseline, results files round-trip, the Markdown table is exact, and
the machine record has its fields."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from tests._bench import BENCHMARKS, check_rows, load_bench
from tests._bench import harness as h


def test_warm_up_calls_are_not_counted_and_repeats_are() -> None:
    calls: list[str] = []
    setups: list[int] = []

    def fn() -> int:
        calls.append("x")
        return len(calls)

    timing = h.time_call(fn, repeats=4, warmup=2, setup=lambda: setups.append(1))
    assert len(calls) == 6 and len(setups) == 6  # setup before every call, warm-ups too
    assert len(timing.samples) == 4 and timing.warmup == 2
    assert timing.value == 6  # the last counted call's value
    assert all(s >= 0 for s in timing.samples)
    assert timing.min <= timing.median <= timing.max
    assert timing.seconds == timing.median
    assert h.once(fn).samples.__len__() == 1 and len(calls) == 7  # no warm-up
    with pytest.raises(ValueError, match="'repeats' parameter must be an integer ≥ 1"):
        h.time_call(fn, repeats=0)
    with pytest.raises(ValueError, match="'warmup' parameter"):
        h.time_call(fn, repeats=1, warmup=-1)


def test_timing_statistics() -> None:
    t = h.Timing((3.0, 1.0, 2.0, 10.0), None)
    assert (t.median, t.min, t.max, t.mean) == (2.5, 1.0, 10.0, 4.0)
    assert t.spread == pytest.approx((10.0 - 1.0) / 2.5)
    assert h.Timing((2.0,), None).spread == 0.0
    with pytest.raises(ValueError, match="at least one sample"):
        h.Timing((), None)


def test_interleaved_rounds_pass_the_round_and_count_only_timed_rounds() -> None:
    seen: list[tuple[str, int]] = []

    def fn(name: str):  # type: ignore[no-untyped-def]
        return lambda r: seen.append((name, r)) or r

    timings = h.time_interleaved({"a": fn("a"), "b": fn("b")}, repeats=3, warmup=1)
    assert seen == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3), ("b", 3)]
    assert {k: (len(t.samples), t.value) for k, t in timings.items()} == {"a": (3, 3), "b": (3, 3)}
    seen.clear()
    h.time_interleaved(
        {n: fn(n) for n in "abc"}, repeats=20, warmup=0, shuffle=np.random.default_rng(0)
    )
    rounds = [seen[i : i + 3] for i in range(0, 60, 3)]
    assert all(sorted(n for n, _ in r) == ["a", "b", "c"] for r in rounds)
    assert len({tuple(n for n, _ in r) for r in rounds}) > 1  # the order is drawn per round


def test_stage_timer_times_each_stage_exclusively() -> None:
    class Work:
        def outer(self) -> int:
            return self.inner() + 1

        def inner(self) -> int:
            time.sleep(0.05)
            return 1

    class Inherited(Work):
        pass

    work = Inherited()
    stages = h.StageTimer()
    with stages.patched([(Inherited, "outer", "outer"), (work, "inner", "inner")]):
        assert work.outer() == 2 and work.outer() == 2
    assert stages.calls == {"outer": 2, "inner": 2}
    assert set(stages.seconds) == {"outer", "inner"}
    # exclusive: the outer stage's time leaves out the inner calls it made
    assert stages.seconds["inner"] >= 0.1 > stages.seconds["outer"] >= 0
    assert "inner" not in vars(work) and "outer" not in vars(Inherited)  # restored
    stages.reset()
    assert stages.seconds == {} and stages.calls == {}


def _row(**kw: object) -> h.Row:
    base: dict[str, object] = dict(
        name="exact top-K, n = 1,000",
        config={"n": np.int64(1000), "sizes": (1, 2)},
        measured=96.4,
        unit="ms",
        baseline="FAISS flat search",
        baseline_measured=123.0,
    )
    return h.Row(**{**base, **kw})  # type: ignore[arg-type]


def test_the_ratio_is_measured_over_baseline() -> None:
    row = _row()
    assert row.ratio == 96.4 / 123.0
    assert row.config == {"n": 1000, "sizes": [1, 2]}  # JSON's types
    assert type(row.config["n"]) is int
    with pytest.raises(TypeError):
        h.Row(name="x", measured=1, unit="s", baseline="y", baseline_measured=2, ratio=9)  # type: ignore[call-arg]
    for bad, message in (
        ({"unit": ""}, "'unit' must be a non-empty string"),
        ({"baseline": " "}, "'baseline' must be a non-empty string"),
        ({"baseline_measured": 0.0}, "there is no ratio"),
        ({"measured": float("nan")}, "must be finite"),
        ({"measured": True}, "must be a real number"),
        ({"met": True}, "needs a 'goal'"),
    ):
        with pytest.raises(ValueError, match=message):
            _row(**bad)
    tampered = {**_row().to_dict(), "ratio": 0.5}
    with pytest.raises(ValueError, match="is not measured / baseline_measured"):
        h.Row.from_dict(tampered)


def test_markdown_table_renders_rows_exactly() -> None:
    rows = [
        _row(goal="≤ 1.3×", met=True),
        h.Row(
            name="group commit, ledger store, 64 writers",
            measured=22846.4,
            unit="appends/s",
            baseline="one writer, one commit per append",
            baseline_measured=3839.0,
            goal="≥ 10× at 64 writers",
            met=False,
            notes="efficiency 0.04 | disk 9,656 syncs/s",
        ),
        h.Row(name="noise share", measured=0.5, unit="s", baseline="query", baseline_measured=2.0),
    ]
    assert h.markdown_table(rows) == "\n".join(
        [
            "| row | measured | named baseline | ratio | goal | met? |",
            "|---|---|---|---|---|---|",
            "| exact top-K, n = 1,000 | 96.4 ms | FAISS flat search: 123 ms | 0.784× | ≤ 1.3× "
            "| yes |",
            "| group commit, ledger store, 64 writers | 22,846 appends/s (efficiency 0.04 \\| "
            "disk 9,656 syncs/s) | one writer, one commit per append: 3,839 appends/s | 5.95× "
            "| ≥ 10× at 64 writers | no |",
            "| noise share | 0.5 s | query: 2 s | 0.25× | — | — |",
        ]
    )


def test_results_round_trip_and_machine_record(tmp_path: Path) -> None:
    parser = h.bench_parser("demo", repeats=5, quick_repeats=1)
    parser.add_argument("--size", type=int, default=3)
    path = tmp_path / "out" / "demo.json"
    session = h.start("demo", parser, ["--quick", "--json", str(path)])
    assert session.quick and session.repeats == 1 and session.args.size == 3
    rows = [_row(), _row(name="second", goal="< 2×", met=True, notes="n")]
    document = session.finish(rows, {"sizes": (1, 2), "nested": {"x": np.float64(0.5)}})
    assert json.loads(path.read_text()) == document
    assert list(document)[:3] == ["benchmark", "machine", "rows"]
    back = h.load_results(path)
    assert back.benchmark == "demo" and back.rows == tuple(rows)
    assert back.details == {"sizes": [1, 2], "nested": {"x": 0.5}}
    check_rows(back.rows)
    m = back.machine
    assert m == h.Machine.from_dict(document["machine"])
    assert m.command == ["benchmarks/bench_demo.py", "--quick", "--json", str(path)]
    assert m.cores and m.cores >= 1 and m.cpu_model and m.python and m.platform
    assert m.load_before is not None and len(m.load_before) == 3 and m.load_after is not None
    assert "numpy" in m.versions and m.seconds >= 0 and m.started_utc.endswith("+00:00")
    assert any(b["user_api"] == "blas" and b["num_threads"] >= 1 for b in m.blas)
    assert m.git_commit is None or len(m.git_commit) == 40
    assert m.git_dirty in (None, True, False)
    assert "cores" in m.summary()
    with pytest.raises(ValueError, match="cannot use the keys"):
        h.results_document("demo", m, rows, {"rows": []})
    (tmp_path / "bad.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="not a benchmark results file"):
        h.load_results(tmp_path / "bad.json")


def test_every_script_flag(capsys: pytest.CaptureFixture[str]) -> None:
    parser = h.bench_parser("demo", repeats=3, repeats_aliases=("--rounds",))
    assert parser.parse([]).repeats == 3 and parser.parse(["--quick"]).repeats == 3
    assert parser.parse(["--rounds", "2"]).repeats == 2
    assert parser.parse(["--quick", "--repeats", "4"]).repeats == 4
    assert parser.parse([]).json is None and not parser.parse([]).quick
    with pytest.raises(SystemExit):
        parser.parse(["--repeats", "0"])
    assert "--repeats must be at least 1" in capsys.readouterr().err


SCRIPTS = sorted(p.stem.removeprefix("bench_") for p in BENCHMARKS.glob("bench_*.py"))


def test_every_script_is_listed() -> None:
    assert len(SCRIPTS) == 18 and "fastpaths" in SCRIPTS and "audited_retrieval" in SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_has_the_harness_flags(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        load_bench(name).main(["--help"])
    assert done.value.code == 0
    helped = capsys.readouterr().out
    for flag in ("--quick", "--json PATH", "--repeats N"):
        assert flag in helped, (name, flag)
