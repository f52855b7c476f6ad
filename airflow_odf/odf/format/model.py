"""The ODF metadata model: every event and type of the spec as typed, immutable dataclasses.

The declarations here are also the schema the codecs follow: field order is the FlatBuffers
declaration order (it decides slot numbers and byte layout), `Annotated` markers give scalar widths,
and union members are listed in union-id order. A reader who knows the spec finds each type by its
spec name; union members are named `<Union><Variant>` as in the reference implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Annotated, Any, Union

from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.format.timestamps import Timestamp


class Scalar:
    """FlatBuffers width of an integer field (`struct` format character)."""

    __slots__ = ("fmt",)

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt

    def __repr__(self) -> str:
        return f"Scalar({self.fmt!r})"


I32 = Annotated[int, Scalar("i")]
U32 = Annotated[int, Scalar("I")]
U64 = Annotated[int, Scalar("Q")]


class UnionOf:
    """Marks a field type as an ODF union; members are the `Union[...]` arguments in id order (1, 2, ...)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"UnionOf({self.name!r})"


class Int32Enum(IntEnum):
    """An enum stored as int32 in FlatBuffers."""


class Int16Enum(IntEnum):
    """An enum stored as int16 in FlatBuffers."""


#: Free-form `<domain>/<path>` -> JSON attributes (stored as canonical JSON text in FlatBuffers).
ExtraAttributes = dict[str, Any]

_model = dataclass(frozen=True, kw_only=True)

# --------------------------------------------------------------------------------------------------
# Enums
# --------------------------------------------------------------------------------------------------


class DatasetKind(Int32Enum):
    ROOT = 0
    DERIVATIVE = 1


class CompressionFormat(Int32Enum):
    GZIP = 0
    ZIP = 1


class SourceOrdering(Int32Enum):
    BY_EVENT_TIME = 0
    BY_NAME = 1


class MqttQos(Int32Enum):
    AT_MOST_ONCE = 0
    AT_LEAST_ONCE = 1
    EXACTLY_ONCE = 2


class TimeUnit(Int16Enum):
    SECOND = 0
    MILLISECOND = 1
    MICROSECOND = 2
    NANOSECOND = 3


class OperationType(IntEnum):
    """Values of the `op` data column (RFC-015)."""

    APPEND = 0
    RETRACT = 1
    CORRECT_FROM = 2
    CORRECT_TO = 3


# --------------------------------------------------------------------------------------------------
# RFC-016 data schema
# --------------------------------------------------------------------------------------------------


@_model
class DataTypeBinary:
    fixed_length: U64 | None = None


@_model
class DataTypeBool:
    pass


@_model
class DataTypeDate:
    pass


@_model
class DataTypeDecimal:
    precision: U32
    scale: I32


@_model
class DataTypeDuration:
    unit: TimeUnit | None = None


@_model
class DataTypeFloat16:
    pass


@_model
class DataTypeFloat32:
    pass


@_model
class DataTypeFloat64:
    pass


@_model
class DataTypeInt8:
    pass


@_model
class DataTypeInt16:
    pass


@_model
class DataTypeInt32:
    pass


@_model
class DataTypeInt64:
    pass


@_model
class DataTypeUInt8:
    pass


@_model
class DataTypeUInt16:
    pass


@_model
class DataTypeUInt32:
    pass


@_model
class DataTypeUInt64:
    pass


@_model
class DataTypeList:
    item_type: DataType
    fixed_length: U64 | None = None


@_model
class DataTypeMap:
    key_type: DataType
    value_type: DataType
    keys_sorted: bool | None = None


@_model
class DataTypeNull:
    pass


@_model
class DataTypeOption:
    inner: DataType


@_model
class DataTypeStruct:
    fields: list[DataField]


@_model
class DataTypeTime:
    unit: TimeUnit | None = None


@_model
class DataTypeTimestamp:
    unit: TimeUnit | None = None
    timezone: str | None = None


@_model
class DataTypeString:
    pass


DataType = Annotated[
    Union[  # noqa: UP007 - member order is the union id order
        DataTypeBinary,
        DataTypeBool,
        DataTypeDate,
        DataTypeDecimal,
        DataTypeDuration,
        DataTypeFloat16,
        DataTypeFloat32,
        DataTypeFloat64,
        DataTypeInt8,
        DataTypeInt16,
        DataTypeInt32,
        DataTypeInt64,
        DataTypeUInt8,
        DataTypeUInt16,
        DataTypeUInt32,
        DataTypeUInt64,
        DataTypeList,
        DataTypeMap,
        DataTypeNull,
        DataTypeOption,
        DataTypeStruct,
        DataTypeTime,
        DataTypeTimestamp,
        DataTypeString,
    ],
    UnionOf("DataType"),
]


@_model
class DataField:
    name: str
    type: DataType
    extra: ExtraAttributes | None = None


@_model
class DataSchema:
    fields: list[DataField]
    extra: ExtraAttributes | None = None


# --------------------------------------------------------------------------------------------------
# Sources: fetch, prepare, read, merge
# --------------------------------------------------------------------------------------------------


@_model
class EventTimeSourceFromMetadata:
    pass


@_model
class EventTimeSourceFromPath:
    pattern: str
    timestamp_format: str | None = None


@_model
class EventTimeSourceFromSystemTime:
    pass


EventTimeSource = Annotated[
    Union[EventTimeSourceFromMetadata, EventTimeSourceFromPath, EventTimeSourceFromSystemTime],  # noqa: UP007
    UnionOf("EventTimeSource"),
]


@_model
class SourceCachingForever:
    pass


SourceCaching = Annotated[SourceCachingForever, UnionOf("SourceCaching")]


@_model
class RequestHeader:
    name: str
    value: str


@_model
class EnvVar:
    name: str
    value: str | None = None


@_model
class MqttTopicSubscription:
    path: str
    qos: MqttQos | None = None


@_model
class FetchStepUrl:
    url: str
    event_time: EventTimeSource | None = None
    cache: SourceCaching | None = None
    headers: list[RequestHeader] | None = None


@_model
class FetchStepFilesGlob:
    path: str
    event_time: EventTimeSource | None = None
    cache: SourceCaching | None = None
    order: SourceOrdering | None = None


@_model
class FetchStepContainer:
    image: str
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None


@_model
class FetchStepMqtt:
    host: str
    port: I32
    username: str | None = None
    password: str | None = None
    topics: list[MqttTopicSubscription]


@_model
class FetchStepEthereumLogs:
    chain_id: U64 | None = None
    node_url: str | None = None
    filter: str | None = None
    signature: str | None = None


FetchStep = Annotated[
    Union[  # noqa: UP007
        FetchStepUrl, FetchStepFilesGlob, FetchStepContainer, FetchStepMqtt, FetchStepEthereumLogs
    ],
    UnionOf("FetchStep"),
]


@_model
class PrepStepDecompress:
    format: CompressionFormat
    sub_path: str | None = None


@_model
class PrepStepPipe:
    command: list[str]


PrepStep = Annotated[Union[PrepStepDecompress, PrepStepPipe], UnionOf("PrepStep")]  # noqa: UP007


@_model
class ReadStepCsv:
    ddl_schema: list[str] | None = None
    separator: str | None = None
    encoding: str | None = None
    quote: str | None = None
    escape: str | None = None
    header: bool | None = None
    infer_schema: bool | None = None
    null_value: str | None = None
    date_format: str | None = None
    timestamp_format: str | None = None
    schema: DataSchema | None = None


@_model
class ReadStepGeoJson:
    ddl_schema: list[str] | None = None
    schema: DataSchema | None = None


@_model
class ReadStepEsriShapefile:
    ddl_schema: list[str] | None = None
    sub_path: str | None = None
    schema: DataSchema | None = None


@_model
class ReadStepParquet:
    ddl_schema: list[str] | None = None
    schema: DataSchema | None = None


@_model
class ReadStepJson:
    sub_path: str | None = None
    ddl_schema: list[str] | None = None
    date_format: str | None = None
    encoding: str | None = None
    timestamp_format: str | None = None
    schema: DataSchema | None = None


@_model
class ReadStepNdJson:
    ddl_schema: list[str] | None = None
    date_format: str | None = None
    encoding: str | None = None
    timestamp_format: str | None = None
    schema: DataSchema | None = None


@_model
class ReadStepNdGeoJson:
    ddl_schema: list[str] | None = None
    schema: DataSchema | None = None


ReadStep = Annotated[
    Union[  # noqa: UP007
        ReadStepCsv,
        ReadStepGeoJson,
        ReadStepEsriShapefile,
        ReadStepParquet,
        ReadStepJson,
        ReadStepNdJson,
        ReadStepNdGeoJson,
    ],
    UnionOf("ReadStep"),
]


@_model
class SqlQueryStep:
    alias: str | None = None
    query: str


@_model
class TemporalTable:
    name: str
    primary_key: list[str]


@_model
class TransformSql:
    engine: str
    version: str | None = None
    query: str | None = None
    queries: list[SqlQueryStep] | None = None
    temporal_tables: list[TemporalTable] | None = None


Transform = Annotated[TransformSql, UnionOf("Transform")]


@_model
class MergeStrategyAppend:
    pass


@_model
class MergeStrategyLedger:
    primary_key: list[str]


@_model
class MergeStrategySnapshot:
    primary_key: list[str]
    compare_columns: list[str] | None = None


@_model
class MergeStrategyChangelogStream:
    primary_key: list[str]


@_model
class MergeStrategyUpsertStream:
    primary_key: list[str]


MergeStrategy = Annotated[
    Union[  # noqa: UP007
        MergeStrategyAppend,
        MergeStrategyLedger,
        MergeStrategySnapshot,
        MergeStrategyChangelogStream,
        MergeStrategyUpsertStream,
    ],
    UnionOf("MergeStrategy"),
]

# --------------------------------------------------------------------------------------------------
# Data and checkpoints
# --------------------------------------------------------------------------------------------------


@_model
class OffsetInterval:
    """Closed interval `[start, end]` of record offsets."""

    start: U64
    end: U64


@_model
class DataSlice:
    logical_hash: Multihash
    physical_hash: Multihash
    offset_interval: OffsetInterval
    size: U64


@_model
class Checkpoint:
    physical_hash: Multihash
    size: U64


@_model
class SourceState:
    source_name: str
    kind: str
    value: str


@_model
class ExecuteTransformInput:
    """What one input contributed: blocks `(prev_block_hash, new_block_hash]`, offsets `(prev, new]`."""

    dataset_id: DatasetId
    prev_block_hash: Multihash | None = None
    new_block_hash: Multihash | None = None
    prev_offset: U64 | None = None
    new_offset: U64 | None = None


@_model
class TransformInput:
    dataset_ref: str
    alias: str | None = None


@_model
class AttachmentEmbedded:
    path: str
    content: str


@_model
class AttachmentsEmbedded:
    items: list[AttachmentEmbedded]


Attachments = Annotated[AttachmentsEmbedded, UnionOf("Attachments")]


@_model
class DatasetVocabulary:
    offset_column: str | None = None
    operation_type_column: str | None = None
    system_time_column: str | None = None
    event_time_column: str | None = None


# --------------------------------------------------------------------------------------------------
# Metadata events
# --------------------------------------------------------------------------------------------------


@_model
class AddData:
    prev_checkpoint: Multihash | None = None
    prev_offset: U64 | None = None
    new_data: DataSlice | None = None
    new_checkpoint: Checkpoint | None = None
    new_watermark: Timestamp | None = None
    new_source_state: SourceState | None = None
    extra: ExtraAttributes | None = None


@_model
class ExecuteTransform:
    query_inputs: list[ExecuteTransformInput]
    prev_checkpoint: Multihash | None = None
    prev_offset: U64 | None = None
    new_data: DataSlice | None = None
    new_checkpoint: Checkpoint | None = None
    new_watermark: Timestamp | None = None


@_model
class Seed:
    dataset_id: DatasetId
    dataset_kind: DatasetKind


@_model
class SetPollingSource:
    fetch: FetchStep
    prepare: list[PrepStep] | None = None
    read: ReadStep
    preprocess: Transform | None = None
    merge: MergeStrategy


@_model
class SetTransform:
    inputs: list[TransformInput]
    transform: Transform


@_model
class SetVocab:
    offset_column: str | None = None
    operation_type_column: str | None = None
    system_time_column: str | None = None
    event_time_column: str | None = None


@_model
class SetAttachments:
    attachments: Attachments


@_model
class SetInfo:
    description: str | None = None
    keywords: list[str] | None = None


@_model
class SetLicense:
    short_name: str
    name: str
    spdx_id: str | None = None
    website_url: str


@_model
class SetDataSchema:
    """`raw_arrow_schema` is the deprecated RFC-010 form (a bare Arrow `Schema` flatbuffer)."""

    raw_arrow_schema: bytes | None = None
    schema: DataSchema | None = None


@_model
class AddPushSource:
    source_name: str
    read: ReadStep
    preprocess: Transform | None = None
    merge: MergeStrategy


@_model
class DisablePushSource:
    source_name: str


@_model
class DisablePollingSource:
    pass


MetadataEvent = Annotated[
    Union[  # noqa: UP007
        AddData,
        ExecuteTransform,
        Seed,
        SetPollingSource,
        SetTransform,
        SetVocab,
        SetAttachments,
        SetInfo,
        SetLicense,
        SetDataSchema,
        AddPushSource,
        DisablePushSource,
        DisablePollingSource,
    ],
    UnionOf("MetadataEvent"),
]


@_model
class MetadataBlock:
    system_time: Timestamp
    prev_block_hash: Multihash | None = None
    sequence_number: U64
    event: MetadataEvent


@_model
class DatasetSnapshot:
    """A manifest describing a dataset to create; `name` is a dataset alias."""

    name: str
    kind: DatasetKind
    metadata: list[MetadataEvent]


@_model
class Watermark:
    system_time: Timestamp
    event_time: Timestamp
