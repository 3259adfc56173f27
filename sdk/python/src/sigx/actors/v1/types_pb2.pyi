from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HostStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HOST_STATUS_UNSPECIFIED: _ClassVar[HostStatus]
    HOST_STATUS_JOINING: _ClassVar[HostStatus]
    HOST_STATUS_ACTIVE: _ClassVar[HostStatus]
    HOST_STATUS_LEAVING: _ClassVar[HostStatus]
HOST_STATUS_UNSPECIFIED: HostStatus
HOST_STATUS_JOINING: HostStatus
HOST_STATUS_ACTIVE: HostStatus
HOST_STATUS_LEAVING: HostStatus

class ActorRef(_message.Message):
    __slots__ = ("actor_type", "key")
    ACTOR_TYPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    actor_type: str
    key: str
    def __init__(self, actor_type: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class TypeList(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class HostDescriptor(_message.Message):
    __slots__ = ("id", "advertise", "types", "meta", "status", "started_at_unix_ms", "stateful_types")
    class MetaEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    ADVERTISE_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    STATEFUL_TYPES_FIELD_NUMBER: _ClassVar[int]
    id: str
    advertise: str
    types: TypeList
    meta: _containers.ScalarMap[str, str]
    status: HostStatus
    started_at_unix_ms: int
    stateful_types: TypeList
    def __init__(self, id: _Optional[str] = ..., advertise: _Optional[str] = ..., types: _Optional[_Union[TypeList, _Mapping]] = ..., meta: _Optional[_Mapping[str, str]] = ..., status: _Optional[_Union[HostStatus, str]] = ..., started_at_unix_ms: _Optional[int] = ..., stateful_types: _Optional[_Union[TypeList, _Mapping]] = ...) -> None: ...

class TraceContext(_message.Message):
    __slots__ = ("traceparent", "tracestate")
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    traceparent: str
    tracestate: str
    def __init__(self, traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ...) -> None: ...
