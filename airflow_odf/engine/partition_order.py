"""Offset order over one Spark read of many slice files: which file each output partition reads.

Reading each slice file on its own keeps the files' order, but every read costs Spark a relation, a scan
and its planning (about 0.04 s per file, 0.2 s of a 1.2 s job over five files). One read of all the
files is cheaper, but Spark orders its partitions largest split first, not in the files' order.

So the files are read at once, one split per partition (`one_split_per_partition`), and the physical
plan says which file and which byte range each partition reads. When the coordinator hashes the parts
while Spark writes them, the splits are chosen so that Spark runs them in the files' order where that
can be had (`SplitPlan`). When every output partition is one
input partition passed on row by row (scans, filters, projections and unions of those: nothing that
exchanges, sorts or aggregates rows: `output_scans`), sorting the output's partitions by (union branch,
first offset of the file, start of the split) puts the output in the inputs' offset order
(`partition_keys`, which can be read while Spark runs the job). For any other plan there are no keys,
and the caller reads the files one by one. Planning the query takes about 30 ms; when its analyzed plan
already shows only filters, projections and unions (`looks_row_by_row`), the caller starts the job and
plans it meanwhile.

This looks at Spark's physical plan through its JVM objects (the pinned Spark version; tests check the
order it gives). What it cannot read, it reports as no keys. A Spark Connect client has no JVM objects:
there the split settings come from the session's conf, the plan from the server's formatted `explain`
(`served_scan_count`) and the keys from one job that tells which row groups each partition reads, run
while Spark writes (`served_partition_keys`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_odf.engine.py4j_errors import Py4JError
from airflow_odf.engine.session import default_parallelism, is_connect, session_conf

PartitionKey = tuple[int, ...]
"""(union branches..., first offset of the file, start of the split, length of the split): sorting the
keys puts the partitions in the inputs' offset order. A partition of several splits has the key None:
it must write no rows (the files' rests, see `SplitPlan`)."""

# Operators whose output partition i is their only child's partition i, row by row in the same order.
_ROW_BY_ROW = frozenset(
    {"WholeStageCodegenExec", "InputAdapter", "ColumnarToRowExec", "FilterExec", "ProjectExec"}
)
_OPEN_COST = "spark.sql.files.openCostInBytes"
_MAX_PARTITION_BYTES = "spark.sql.files.maxPartitionBytes"
_MIN_PARTITIONS = "spark.sql.files.minPartitionNum"
# an open cost above any split size: Spark then never packs two splits into one partition
NEVER_PACK = 1 << 50


def can_read_plans(spark: SparkSession) -> bool:
    """Whether the session's JVM objects are reachable: a classic session. A Spark Connect session's plans
    live in the server: `served_scan_count` and `served_partition_keys` read them there."""
    return not is_connect(spark)


SplitSettings = tuple[int, int, int]
"""(open cost, largest split, parallelism): what Spark makes its file splits from."""


@contextmanager
def one_split_per_partition(
    spark: SparkSession,
    file_sizes: list[int],
    middles: list[list[int]] | None = None,
    settings: SplitSettings | None = None,
) -> Iterator[None]:
    """For the body's file reads: each split in a partition of its own (the session's settings are
    restored afterwards), the splits as large as Spark would make them for files of `file_sizes`, or,
    given the files' row groups' `middles`, in the files' order where `SplitPlan.of` finds that it can
    be had. The session's `split_settings` are read unless given. A Spark whose settings cannot be read
    is left as it is: keys then come from its own partitions, and there are none where it packed several
    files into one."""
    settings = settings or split_settings(spark)
    if settings is None:
        yield
        return
    plan = SplitPlan.of(file_sizes, *settings, middles)
    with session_conf(spark, {_MAX_PARTITION_BYTES: str(plan.split), _OPEN_COST: str(plan.open_cost)}):
        yield


def split_settings(spark: SparkSession) -> SplitSettings | None:
    """The session's `SplitSettings`; None when they cannot be read. They apply when Spark plans a scan,
    so a caller may read them while it builds its frames (on Spark Connect the server's cores take a
    tiny job)."""
    return _served_split_settings(spark) if is_connect(spark) else _split_settings(spark)


def _split_settings(spark: SparkSession) -> SplitSettings | None:
    """`split_settings` of a classic session, from its JVM's SQL conf."""
    try:
        conf = spark._jsparkSession.sessionState().conf()  # type: ignore[attr-defined]
        minimum = conf.filesMinPartitionNum()
        parallelism = minimum.get() if minimum.isDefined() else spark.sparkContext.defaultParallelism
        return conf.filesOpenCostInBytes(), conf.filesMaxPartitionBytes(), parallelism
    except Py4JError:
        return None


def _served_split_settings(spark: SparkSession) -> SplitSettings | None:
    """`_split_settings` of a Spark Connect session: its conf as the server states it, the server's
    cores counted by a tiny job (`default_parallelism`)."""
    try:
        open_cost, max_bytes = (byte_size(spark.conf.get(key)) for key in (_OPEN_COST, _MAX_PARTITION_BYTES))
        minimum = spark.conf.get(_MIN_PARTITIONS, None)
        parallelism = int(minimum) if minimum else default_parallelism(spark)
    except (PySparkException, ValueError, TypeError):
        return None
    return open_cost, max_bytes, parallelism


_BYTE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_BYTE_SIZE = re.compile(r"\s*(\d+)\s*([kmgtp]?)b?\s*", re.IGNORECASE)


def byte_size(text: str | None) -> int:
    """A size as Spark's conf states it (`4194304`, `128MB`, `4m`: units of 1024); ValueError for
    anything else."""
    match = _BYTE_SIZE.fullmatch(text or "")
    if match is None:
        raise ValueError(f"not a size in bytes: {text!r}")
    return int(match.group(1)) * _BYTE_UNITS[match.group(2).lower()]


@dataclass(frozen=True)
class SplitPlan:
    """The split size and open cost a read of many files is given."""

    split: int
    open_cost: int

    @classmethod
    def of(
        cls,
        file_sizes: list[int],
        open_cost: int,
        max_bytes: int,
        parallelism: int,
        middles: list[list[int]] | None = None,
    ) -> SplitPlan:
        """Spark's own split size (FilePartition.maxSplitBytes), each split alone in its partition; or,
        given every file's row groups' `middles` (the split holding a row group's middle reads it), in
        the files' order: splits as long as the smallest file, when that is less than Spark's own, more
        than half the largest file, and holds every file's row groups' middles. Spark runs the splits
        longest first, keeping the files' order among equal lengths, so every file's first split then
        runs in the files' order, holding all its rows; the files' rests read none and share the last
        partition (with no open cost Spark packs splits until they would pass the split size, which no
        two first splits do). The parts are then committed about in the slice's order
        (`parts_publisher`)."""
        total = sum(file_sizes) + open_cost * len(file_sizes)
        split = min(max_bytes, max(open_cost, total // max(1, parallelism)))
        smallest, largest = min(file_sizes, default=0), max(file_sizes, default=0)
        in_order = (
            middles is not None
            and 0 < smallest < split
            and 2 * smallest > largest
            # Spark keeps a split this small only if its bytes per core (without open cost) are no less
            and smallest <= sum(file_sizes) // max(1, parallelism)
            and all(middle < smallest for file in middles for middle in file)
        )
        if in_order and smallest < largest:
            return cls(smallest, 0)
        return cls(smallest if in_order else split, NEVER_PACK)


@dataclass(frozen=True)
class _Scan:
    node: Any


@dataclass(frozen=True)
class _Union:
    branches: list[ScanTree]


ScanTree = _Scan | _Union
"""The scans behind a row-by-row plan's output partitions: one scan, or a union's branches in order."""


# Logical operators that Spark plans as `_ROW_BY_ROW` operators, file scans and unions; a subquery inside
# an expression is not among them (the optimizer turns it into a join).
_ROW_BY_ROW_LOGICAL = frozenset({"Project", "Filter", "SubqueryAlias", "View", "LogicalRelation", "Union"})


def looks_row_by_row(df: DataFrame) -> bool:
    """Whether `df`'s analyzed plan only projects, filters and unions file relations, with no subquery in
    any expression: its physical plan then passes the scans' partitions on row by row, so the caller
    can start the job and have `output_scans` confirm it meanwhile. The analyzed plan is already there:
    a few JVM round trips per operator, where planning the query first costs about 30 ms."""
    try:
        plan = df._jdf.queryExecution().analyzed()
        patterns = df.sparkSession._jvm.org.apache.spark.sql.catalyst.trees.TreePattern  # type: ignore[union-attr]
        return not plan.containsPattern(patterns.PLAN_EXPRESSION()) and _logical_row_by_row(plan)
    except Py4JError:
        return False


def _logical_row_by_row(node: Any) -> bool:
    if node.getClass().getSimpleName() not in _ROW_BY_ROW_LOGICAL:
        return False
    children = node.children()
    return all(_logical_row_by_row(children.apply(i)) for i in range(children.size()))


def output_scans(df: DataFrame) -> ScanTree | None:
    """The file scans whose partitions `df`'s output partitions pass on row by row; None when any
    output partition does more (exchanges, sorts, aggregates), or the plan cannot be read. Planning,
    without reading the scans' splits (`partition_keys`)."""
    try:
        return _scans(df._jdf.queryExecution().executedPlan())
    except Py4JError:
        return None


def _scans(node: Any) -> ScanTree | None:
    kind = node.getClass().getSimpleName()
    children = [node.children().apply(i) for i in range(node.children().size())]
    if kind == "FileSourceScanExec":
        return _Scan(node)
    if kind == "UnionExec":  # the children's partitions, one child after the other
        branches: list[ScanTree] = []
        for child in children:
            found = _scans(child)
            if found is None:
                return None
            branches.append(found)
        return _Union(branches)
    if kind in _ROW_BY_ROW and len(children) == 1:
        return _scans(children[0])
    return None


def partition_keys(scans: ScanTree, first_offsets: Mapping[str, int]) -> list[PartitionKey | None] | None:
    """Per output partition (in Spark's partition order), its place in the inputs' offset order, or
    None for a partition of several splits (it must write no rows); None unless every split is of a file
    in `first_offsets` (a slice file's name -> its first offset). Reads every split through the JVM: a
    few round trips per partition."""
    try:
        return _keys(scans, first_offsets)
    except Py4JError:
        return None


def _keys(scans: ScanTree, first_offsets: Mapping[str, int]) -> list[PartitionKey | None] | None:
    if isinstance(scans, _Scan):
        return _scan_keys(scans.node, first_offsets)
    keys: list[PartitionKey | None] = []
    for branch, child in enumerate(scans.branches):
        found = _keys(child, first_offsets)
        if found is None:
            return None
        keys.extend(None if key is None else (branch, *key) for key in found)
    return keys


def _scan_keys(scan: Any, first_offsets: Mapping[str, int]) -> list[PartitionKey | None] | None:
    keys: list[PartitionKey | None] = []
    for partition in scan.inputRDD().partitions():
        files = partition.files()
        names = [split.toPath().getName() for split in files]
        if any(name not in first_offsets for name in names):
            return None
        if len(files) == 1:
            keys.append((first_offsets[names[0]], files[0].start(), files[0].length()))
        else:
            keys.append(None)
    return keys


# A Spark Connect client sees no JVM objects: the server's physical plan comes as `explain` formats it,
# and which row groups each partition reads from the rows themselves.
_SERVED_ROW_BY_ROW = frozenset({"Scan parquet", "ColumnarToRow", "Filter", "Project", "Union"})
_SERVED_OPERATOR = re.compile(r"[\s:|+-]*(?:\* )?(?P<name>.+?) +\(\d+\)\s*")


def served_scan_count(df: DataFrame) -> int | None:
    """On Spark Connect: how many file scans `df`'s output partitions pass on row by row (a union's
    children one after the other, as `output_scans` tells on a classic session), read from the
    server's physical plan as its formatted `explain` shows it; None for any other plan (an exchange,
    a sort, an aggregate, a subquery: the plan is then adaptive) or one that cannot be read."""
    try:
        text = df._explain_string(mode="formatted")  # type: ignore[attr-defined]
    except PySparkException:
        return None
    _, found, after = text.partition("== Physical Plan ==")
    tree = after.strip().split("\n\n", 1)[0].splitlines()
    names = []
    for line in tree:
        operator = _SERVED_OPERATOR.fullmatch(line)
        if operator is None or operator["name"] not in _SERVED_ROW_BY_ROW:
            return None
        names.append(operator["name"])
    return names.count("Scan parquet") if found and names else None


def _any_of(conditions: list[Column]) -> Column:
    """The conditions' OR as a balanced tree: a chain of hundreds would nest as deep in the plan sent."""
    if len(conditions) == 1:
        return conditions[0]
    half = len(conditions) // 2
    return _any_of(conditions[:half]) | _any_of(conditions[half:])


RowGroup = tuple[int, int, int]
"""A row group of a slice file: (first offset of the file, its index in the file, its middle's byte)."""


def served_partition_keys(
    reads: list[DataFrame], offset: Column, row_groups: Mapping[int, RowGroup]
) -> list[PartitionKey | None] | None:
    """On Spark Connect: `partition_keys` from the data. `reads` are the file reads whose union, in
    order, the output's partitions pass on row by row (`served_scan_count`), under the same split
    settings; `row_groups` their files' row groups by first offset. A partition reads whole row groups
    (those whose middle its split holds), so one job that keeps only the rows of those offsets (a
    filter Parquet applies as it reads: it skips the other pages; no exchange) tells which row groups
    each partition reads. A partition reading consecutive row groups of one file reads one split (Spark
    never packs two splits of a file that both hold rows into one partition: only a file's last split
    is shorter than the largest): its key is that file and the bytes from the first group's middle to
    the last's. A partition that reads no rows writes none: its key is None, as is one that reads
    from several files or leaves a gap; None when a row is not the first of a known row group."""
    firsts = _any_of([offset == first for first in sorted(row_groups)])
    located = reduce(DataFrame.union, [read.filter(firsts).select(offset) for read in reads])
    # the partition ids of the union (its partitions are its children's, one after the other)
    try:
        rows = located.select(F.spark_partition_id(), offset).collect()
    except PySparkException:
        return None
    groups: dict[int, list[RowGroup]] = {}
    for partition, first in rows:
        if first not in row_groups:
            return None
        groups.setdefault(partition, []).append(row_groups[first])
    keys: list[PartitionKey | None] = [None] * max([1, *(partition + 1 for partition in groups)])
    for partition, read in groups.items():
        read.sort()
        (file, first_index, first_middle), (last_file, last_index, last_middle) = read[0], read[-1]
        if last_file == file and last_index - first_index + 1 == len(read) == len(set(read)):
            keys[partition] = (file, first_middle, last_middle - first_middle + 1)
    return keys
