"""A root dataset's sources as an ingest or a schema inference runs them: the polling source, or one of
the push sources, looked up by name with one set of messages for both."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.format import model
from airflow_odf.odf.operation import IngestError

POLLING_SOURCE_NAME = "default"  # the name a polling source's state is recorded under


@dataclass(frozen=True)
class Source:
    """The steps of one source. A push source has no fetch and no prepare steps."""

    name: str
    read: Any
    preprocess: model.TransformSql | None
    merge: Any
    prepare: Sequence[model.PrepStep] = ()
    fetch: Any = None  # a FetchStep; None: a push source

    @classmethod
    def polling(cls, source: model.SetPollingSource) -> Source:
        return cls(
            POLLING_SOURCE_NAME,
            source.read,
            source.preprocess,
            source.merge,
            source.prepare or (),
            source.fetch,
        )

    @classmethod
    def push(cls, source: model.AddPushSource) -> Source:
        return cls(source.source_name, source.read, source.preprocess, source.merge)


def push_source(state: ChainState, alias: str, source_name: str | None) -> Source:
    """The named push source, or the only one; IngestError (`no-source`) naming the dataset's push
    sources otherwise."""
    sources = state.push_sources
    if source_name is not None:
        if source_name not in sources:
            known = ", ".join(sorted(sources)) or "none"
            raise IngestError(
                "no-source", f"{alias} has no push source {source_name!r} (push sources: {known})"
            )
        return Source.push(sources[source_name])
    if not sources:
        raise IngestError("no-source", f"{alias} has no push source (AddPushSource)")
    if len(sources) > 1:
        raise IngestError(
            "no-source", f"{alias} has several push sources ({', '.join(sorted(sources))}): name one"
        )
    return Source.push(next(iter(sources.values())))
