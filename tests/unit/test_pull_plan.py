"""Planning and running `odf pull` over several datasets, on real repositories in `tmp_path` (no Spark).

The pipeline of most tests is a diamond with a tail, plus an unrelated push-only root:

    src (polling) ─┬─ left ──┬─ join ── top        other (push only)
                   └─ right ─┘

The per-dataset callables of the executor tests stand in for ingest / transform: they record what ran
and return an `IngestResult` as the real ones do.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.format import model
from airflow_odf.odf.operation import IngestResult
from airflow_odf.odf.repo.pull_plan import (
    NO_POLLING_SOURCE,
    PlannedPull,
    PullFailedError,
    PullOutcome,
    PullPlan,
    PullPlanError,
    plan_pull,
    run_pull_plan,
)
from airflow_odf.odf.repo.repository import DatasetNotFoundError, Repository
from airflow_odf.odf.transform.plan import TransformPlanError

READ = model.ReadStepCsv(header=True, ddl_schema=["event_time TIMESTAMP", "value STRING"])


def polling_root(repo: Repository, name: str) -> None:
    source = model.SetPollingSource(
        fetch=model.FetchStepFilesGlob(path="/nowhere/*.csv"), read=READ, merge=model.MergeStrategyAppend()
    )
    repo.add(model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=[source]))


def push_root(repo: Repository, name: str) -> None:
    source = model.AddPushSource(source_name="default", read=READ, merge=model.MergeStrategyAppend())
    repo.add(model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=[source]))


def derivative(repo: Repository, name: str, *inputs: str) -> None:
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref=i) for i in inputs],
        transform=model.TransformSql(engine="spark", query=f"select * from `{inputs[0]}`"),
    )
    repo.add(model.DatasetSnapshot(name=name, kind=model.DatasetKind.DERIVATIVE, metadata=[transform]))


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    repo = Repository.init(tmp_path / "repo")
    polling_root(repo, "src")
    push_root(repo, "other")
    derivative(repo, "left", "src")
    derivative(repo, "right", "src")
    derivative(repo, "join", "left", "right")
    derivative(repo, "top", "join")
    return repo


def names(plan: PullPlan) -> list[list[str]]:
    return [[p.name for p in level] for level in plan.levels]


def by_name(plan: PullPlan) -> dict[str, PlannedPull]:
    return {p.name: p for p in plan.datasets}


# ----- planning -----


def test_recursive_plan_of_a_diamond(repo: Repository) -> None:
    plan = plan_pull(repo, ["top"], recursive=True)
    assert names(plan) == [["src"], ["left", "right"], ["join"], ["top"]]
    planned = by_name(plan)
    assert {n: p.depth for n, p in planned.items()} == {"src": 0, "left": 1, "right": 1, "join": 2, "top": 3}
    assert {n: p.action for n, p in planned.items()} == {
        "src": "ingest",
        "left": "transform",
        "right": "transform",
        "join": "transform",
        "top": "transform",
    }
    assert planned["join"].inputs == (repo.resolve("left"), repo.resolve("right"))
    assert planned["src"].inputs == ()
    assert planned["top"].dataset_id == repo.resolve("top")
    assert planned["top"].head == repo.dataset("top").head()
    assert planned["top"].kind is model.DatasetKind.DERIVATIVE


def test_depth_is_one_more_than_the_deepest_input(repo: Repository) -> None:
    derivative(repo, "mix", "src", "join")  # a short and a long path: the long one counts
    plan = plan_pull(repo, ["mix"], recursive=True)
    assert names(plan) == [["src"], ["left", "right"], ["join"], ["mix"]]
    assert by_name(plan)["mix"].depth == 3


def test_a_plan_of_several_names_shares_the_upstream(repo: Repository) -> None:
    plan = plan_pull(repo, ["left", "right"], recursive=True)
    assert names(plan) == [["src"], ["left", "right"]]
    assert len(plan.datasets) == 3  # src once


def test_without_recursive_only_the_named_datasets_in_dependency_order(repo: Repository) -> None:
    plan = plan_pull(repo, ["top"])
    assert names(plan) == [["top"]]
    assert plan.datasets[0].depth == 3  # depth in the whole graph
    # named in any order, an input still runs first
    assert names(plan_pull(repo, ["join", "src", "TOP", "top"])) == [["src"], ["join"], ["top"]]
    # by identity, as `did:odf:` reference
    assert names(plan_pull(repo, [str(repo.resolve("left"))])) == [["left"]]


def test_all_pulls_every_dataset(repo: Repository) -> None:
    plan = plan_pull(repo, None)
    assert names(plan) == [["other", "src"], ["left", "right"], ["join"], ["top"]]
    other = by_name(plan)["other"]
    assert other.action == "none" and other.note == NO_POLLING_SOURCE
    assert by_name(plan)["src"].note is None
    assert plan_pull(Repository.init(repo.root.parent / "empty"), None).levels == ()


def test_unknown_name_fails_before_anything(repo: Repository) -> None:
    with pytest.raises(DatasetNotFoundError, match="'nope'"):
        plan_pull(repo, ["top", "nope"], recursive=True)


def test_a_dependency_cycle_is_reported(tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "repo")
    polling_root(repo, "r")
    derivative(repo, "x", "r")
    derivative(repo, "y", "x")
    derivative(repo, "x", "y")  # x's transform evolves to read y: x -> y -> x
    with pytest.raises(PullPlanError, match=r"dependency cycle: (x -> y -> x|y -> x -> y)"):
        plan_pull(repo, ["y"], recursive=True)
    with pytest.raises(PullPlanError, match="dependency cycle"):
        plan_pull(repo, None)
    assert names(plan_pull(repo, ["r"], recursive=True)) == [["r"]]  # upstream of the cycle is fine


# ----- running -----


class Recorder:
    """A pull callable: records start / end per dataset, fails the datasets named in `fail`."""

    def __init__(self, fail: dict[str, Exception] | None = None, delay: float = 0.0) -> None:
        self.fail = fail or {}
        self.delay = delay
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, planned: PlannedPull) -> IngestResult:
        with self.lock:
            self.events.append(("start", planned.name))
        time.sleep(self.delay)
        try:
            if planned.name in self.fail:
                raise self.fail[planned.name]
            head = None if planned.head is None else str(planned.head)
            new_blocks = [] if planned.action == "none" else [f"block-of-{planned.name}"]
            return IngestResult(
                planned.name, str(planned.dataset_id), head, head, new_blocks, len(new_blocks)
            )
        finally:
            with self.lock:
                self.events.append(("end", planned.name))

    def started(self) -> list[str]:
        return [n for kind, n in self.events if kind == "start"]


def summary(outcomes: list[PullOutcome[IngestResult]]) -> list[tuple[str, str]]:
    return [(o.name, o.status) for o in outcomes]


def test_levels_run_in_order_and_report_every_dataset(repo: Repository) -> None:
    pull = Recorder(delay=0.02)
    outcomes = run_pull_plan(plan_pull(repo, None), pull, max_workers=2)
    assert summary(outcomes) == [
        ("other", "up-to-date"),
        ("src", "updated"),
        ("left", "updated"),
        ("right", "updated"),
        ("join", "updated"),
        ("top", "updated"),
    ]
    assert outcomes[0].message == NO_POLLING_SOURCE and outcomes[1].message == ""
    assert outcomes[1].result is not None and outcomes[1].result.new_blocks == ["block-of-src"]
    # nothing of a level starts before everything of the previous level ended
    position = {(kind, n): i for i, (kind, n) in enumerate(pull.events)}
    level_of = {p.name: p.depth for p in plan_pull(repo, None).datasets}
    for a, da in level_of.items():
        for b, db in level_of.items():
            if da < db:
                assert position[("end", a)] < position[("start", b)], (a, b)


def test_one_level_runs_concurrently(repo: Repository) -> None:
    barrier = threading.Barrier(2, timeout=10)

    def pull(planned: PlannedPull) -> IngestResult:
        if planned.depth == 1:  # left and right: each waits for the other to have started
            barrier.wait()
        return IngestResult(planned.name, str(planned.dataset_id), None, None, ["b"], 1)

    outcomes = run_pull_plan(plan_pull(repo, ["join"], recursive=True), pull, max_workers=2)
    assert summary(outcomes) == [
        ("src", "updated"),
        ("left", "updated"),
        ("right", "updated"),
        ("join", "updated"),
    ]


def test_max_workers_bounds_the_concurrency(repo: Repository) -> None:
    barrier = threading.Barrier(2, timeout=0.5)

    def pull(planned: PlannedPull) -> IngestResult:
        if planned.depth == 1:  # one worker: the first of the level waits alone and gives up
            barrier.wait()
        return IngestResult(planned.name, str(planned.dataset_id), None, None, [], 0)

    outcomes = run_pull_plan(plan_pull(repo, ["left", "right"], recursive=True), pull, max_workers=1)
    assert summary(outcomes) == [("src", "up-to-date"), ("left", "failed"), ("right", "failed")]
    assert outcomes[1].message.startswith("BrokenBarrierError")
    with pytest.raises(PullPlanError, match="max_workers must be at least 1"):
        run_pull_plan(plan_pull(repo, ["src"]), pull, max_workers=0)


def test_a_failure_skips_downstream_only(repo: Repository) -> None:
    pull = Recorder(fail={"left": TransformPlanError("left has no SetTransform")})
    outcomes = run_pull_plan(plan_pull(repo, None), pull, max_workers=2)
    assert summary(outcomes) == [
        ("other", "up-to-date"),
        ("src", "updated"),
        ("left", "failed"),
        ("right", "updated"),
        ("join", "skipped"),
        ("top", "skipped"),
    ]
    assert sorted(pull.started()) == ["left", "other", "right", "src"]
    left, join, top = outcomes[2], outcomes[4], outcomes[5]
    assert isinstance(left.error, TransformPlanError) and left.result is None
    assert left.line() == "left has no SetTransform"  # already names the dataset: not repeated
    assert join.line() == "join: skipped: upstream dataset 'left' failed"
    assert top.message == "skipped: upstream dataset 'left' failed"  # the failed one, not `join`
    assert join.result is None and join.error is None


def test_failures_of_several_inputs_are_all_named(repo: Repository) -> None:
    pull = Recorder(fail={"left": OSError("disk full"), "right": TransformPlanError("bad query")})
    outcomes = run_pull_plan(plan_pull(repo, ["top"], recursive=True), pull)
    assert summary(outcomes) == [
        ("src", "updated"),
        ("left", "failed"),
        ("right", "failed"),
        ("join", "skipped"),
        ("top", "skipped"),
    ]
    assert outcomes[1].line() == "left: OSError: disk full"
    assert outcomes[2].line() == "right: bad query"
    assert outcomes[4].message == "skipped: upstream datasets 'left', 'right' failed"
    error = PullFailedError([o for o in outcomes if o.status == "failed"])
    assert str(error).splitlines() == ["left: OSError: disk full", "right: bad query"]


def test_a_failed_root_skips_the_whole_pipeline_but_not_the_rest(repo: Repository) -> None:
    pull = Recorder(fail={"src": TransformPlanError("src: fetch.path: no regular file matches")})
    outcomes = run_pull_plan(plan_pull(repo, None), pull)
    assert summary(outcomes) == [
        ("other", "up-to-date"),
        ("src", "failed"),
        ("left", "skipped"),
        ("right", "skipped"),
        ("join", "skipped"),
        ("top", "skipped"),
    ]
    assert sorted(pull.started()) == ["other", "src"]
    assert all(o.message == "skipped: upstream dataset 'src' failed" for o in outcomes[2:])


def test_without_recursive_an_unplanned_input_does_not_block(repo: Repository) -> None:
    # `pull src top`: join is not pulled; src failing does not stop top, which reads join as it is
    pull = Recorder(fail={"src": TransformPlanError("src: broken")})
    outcomes = run_pull_plan(plan_pull(repo, ["src", "top"]), pull)
    assert summary(outcomes) == [("src", "failed"), ("top", "updated")]


# ----- the command line (what fails or does nothing before any engine runs) -----


def odf(repo: Repository, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([args[0], "--repo", str(repo.root), *args[1:]])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_pull_command_checks_its_arguments(repo: Repository, capsys: pytest.CaptureFixture[str]) -> None:
    assert odf(repo, capsys, "pull")[::2] == (2, "odf pull: name the datasets to pull, or use --all\n")
    assert odf(repo, capsys, "pull", "top", "--all")[::2] == (
        2,
        "odf pull: give dataset names or --all, not both\n",
    )
    code, _, err = odf(repo, capsys, "pull", "top", "-r", "--set-watermark", "2020-01-01T00:00:00Z")
    assert code == 2 and err.startswith("--set-watermark: only for a single dataset")
    code, _, err = odf(repo, capsys, "pull", "left", "--set-watermark", "2020-01-01T00:00:00Z")
    assert (code, err) == (2, "--set-watermark: left is not a root with a polling source\n")
    assert odf(repo, capsys, "pull", "--all", "--max-workers", "0")[::2] == (
        2,
        "--max-workers: expected 1 or more, got 0\n",
    )
    assert odf(repo, capsys, "pull", "-r", "top", "nope")[0] == 2


def test_pull_command_reports_a_cycle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = Repository.init(tmp_path / "repo")
    polling_root(repo, "r")
    derivative(repo, "x", "r")
    derivative(repo, "y", "x")
    derivative(repo, "x", "y")
    code, out, err = odf(repo, capsys, "pull", "--all")
    assert (code, out) == (2, "") and err.startswith("dependency cycle: ")


def test_a_push_only_root_has_nothing_to_pull(repo: Repository, capsys: pytest.CaptureFixture[str]) -> None:
    head = str(repo.dataset("other").head())
    code, out, _ = odf(repo, capsys, "pull", "other")
    assert (code, out) == (0, f"other: up to date ({NO_POLLING_SOURCE})\n")
    code, out, _ = odf(repo, capsys, "pull", "other", "--format", "json")
    assert code == 0 and json.loads(out) == {
        "dataset": "other",
        "dataset_id": str(repo.resolve("other")),
        "prev_head": head,
        "new_head": head,
        "new_blocks": [],
        "records": 0,
        "up_to_date": True,
    }
    code, out, _ = odf(repo, capsys, "pull", "other", "-r", "--format", "json")
    [entry] = json.loads(out)
    assert code == 0 and (entry["status"], entry["depth"], entry["message"]) == (
        "up-to-date",
        0,
        NO_POLLING_SOURCE,
    )


def test_pull_all_of_an_empty_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = Repository.init(tmp_path / "repo")
    assert odf(repo, capsys, "pull", "--all") == (0, "no datasets to pull\n", "")
    assert odf(repo, capsys, "pull", "--all", "--format", "json")[:2] == (0, "[]\n")
