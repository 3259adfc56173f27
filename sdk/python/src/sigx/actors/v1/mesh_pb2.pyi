from sigx.actors.v1 import errors_pb2 as _errors_pb2
from sigx.actors.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DirectoryStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIRECTORY_STATUS_UNSPECIFIED: _ClassVar[DirectoryStatus]
    DIRECTORY_STATUS_OK: _ClassVar[DirectoryStatus]
    DIRECTORY_STATUS_NOT_OWNER: _ClassVar[DirectoryStatus]
    DIRECTORY_STATUS_RECOVERING: _ClassVar[DirectoryStatus]
    DIRECTORY_STATUS_NOT_CONVERGED: _ClassVar[DirectoryStatus]
DIRECTORY_STATUS_UNSPECIFIED: DirectoryStatus
DIRECTORY_STATUS_OK: DirectoryStatus
DIRECTORY_STATUS_NOT_OWNER: DirectoryStatus
DIRECTORY_STATUS_RECOVERING: DirectoryStatus
DIRECTORY_STATUS_NOT_CONVERGED: DirectoryStatus

class DeliverRequest(_message.Message):
    __slots__ = ("actor", "method", "payload", "timeout_ms", "targeted", "trace")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TARGETED_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    actor: _types_pb2.ActorRef
    method: str
    payload: bytes
    timeout_ms: int
    targeted: bool
    trace: _types_pb2.TraceContext
    def __init__(self, actor: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ..., method: _Optional[str] = ..., payload: _Optional[bytes] = ..., timeout_ms: _Optional[int] = ..., targeted: _Optional[bool] = ..., trace: _Optional[_Union[_types_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class DeliverResponse(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: bytes
    error: _errors_pb2.ErrorDetail
    def __init__(self, ok: _Optional[bytes] = ..., error: _Optional[_Union[_errors_pb2.ErrorDetail, _Mapping]] = ...) -> None: ...

class DeliverFrame(_message.Message):
    __slots__ = ("call_id", "request")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    request: DeliverRequest
    def __init__(self, call_id: _Optional[int] = ..., request: _Optional[_Union[DeliverRequest, _Mapping]] = ...) -> None: ...

class DeliverAnswer(_message.Message):
    __slots__ = ("call_id", "response")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    response: DeliverResponse
    def __init__(self, call_id: _Optional[int] = ..., response: _Optional[_Union[DeliverResponse, _Mapping]] = ...) -> None: ...

class DirectoryEntry(_message.Message):
    __slots__ = ("actor", "host_id", "activation_id")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_ID_FIELD_NUMBER: _ClassVar[int]
    actor: _types_pb2.ActorRef
    host_id: str
    activation_id: str
    def __init__(self, actor: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ..., host_id: _Optional[str] = ..., activation_id: _Optional[str] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("actor",)
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    actor: _types_pb2.ActorRef
    def __init__(self, actor: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("status", "entry", "owner_hint", "retry_after_ms")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    OWNER_HINT_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    status: DirectoryStatus
    entry: DirectoryEntry
    owner_hint: str
    retry_after_ms: int
    def __init__(self, status: _Optional[_Union[DirectoryStatus, str]] = ..., entry: _Optional[_Union[DirectoryEntry, _Mapping]] = ..., owner_hint: _Optional[str] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: DirectoryEntry
    def __init__(self, entry: _Optional[_Union[DirectoryEntry, _Mapping]] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("status", "winner", "owner_hint", "retry_after_ms")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WINNER_FIELD_NUMBER: _ClassVar[int]
    OWNER_HINT_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    status: DirectoryStatus
    winner: DirectoryEntry
    owner_hint: str
    retry_after_ms: int
    def __init__(self, status: _Optional[_Union[DirectoryStatus, str]] = ..., winner: _Optional[_Union[DirectoryEntry, _Mapping]] = ..., owner_hint: _Optional[str] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class UnregisterRequest(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: DirectoryEntry
    def __init__(self, entry: _Optional[_Union[DirectoryEntry, _Mapping]] = ...) -> None: ...

class UnregisterResponse(_message.Message):
    __slots__ = ("status", "removed", "owner_hint", "retry_after_ms")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    OWNER_HINT_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    status: DirectoryStatus
    removed: bool
    owner_hint: str
    retry_after_ms: int
    def __init__(self, status: _Optional[_Union[DirectoryStatus, str]] = ..., removed: _Optional[bool] = ..., owner_hint: _Optional[str] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class CollectRequest(_message.Message):
    __slots__ = ("requester", "fingerprint", "partitions")
    REQUESTER_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    requester: str
    fingerprint: int
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, requester: _Optional[str] = ..., fingerprint: _Optional[int] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class CollectResponse(_message.Message):
    __slots__ = ("status", "fingerprint", "entries")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    status: DirectoryStatus
    fingerprint: int
    entries: _containers.RepeatedCompositeFieldContainer[DirectoryEntry]
    def __init__(self, status: _Optional[_Union[DirectoryStatus, str]] = ..., fingerprint: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[DirectoryEntry, _Mapping]]] = ...) -> None: ...

class ListCursor(_message.Message):
    __slots__ = ("partition", "key")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    partition: int
    key: str
    def __init__(self, partition: _Optional[int] = ..., key: _Optional[str] = ...) -> None: ...

class ListEntriesRequest(_message.Message):
    __slots__ = ("actor_type", "partitions", "after", "limit")
    ACTOR_TYPE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    actor_type: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    after: ListCursor
    limit: int
    def __init__(self, actor_type: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ..., after: _Optional[_Union[ListCursor, _Mapping]] = ..., limit: _Optional[int] = ...) -> None: ...

class ListedEntry(_message.Message):
    __slots__ = ("partition", "entry")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    partition: int
    entry: DirectoryEntry
    def __init__(self, partition: _Optional[int] = ..., entry: _Optional[_Union[DirectoryEntry, _Mapping]] = ...) -> None: ...

class UnlistedPartition(_message.Message):
    __slots__ = ("partition", "status", "owner_hint")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OWNER_HINT_FIELD_NUMBER: _ClassVar[int]
    partition: int
    status: DirectoryStatus
    owner_hint: str
    def __init__(self, partition: _Optional[int] = ..., status: _Optional[_Union[DirectoryStatus, str]] = ..., owner_hint: _Optional[str] = ...) -> None: ...

class ListEntriesResponse(_message.Message):
    __slots__ = ("entries", "truncated", "unlisted")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    UNLISTED_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[ListedEntry]
    truncated: bool
    unlisted: _containers.RepeatedCompositeFieldContainer[UnlistedPartition]
    def __init__(self, entries: _Optional[_Iterable[_Union[ListedEntry, _Mapping]]] = ..., truncated: _Optional[bool] = ..., unlisted: _Optional[_Iterable[_Union[UnlistedPartition, _Mapping]]] = ...) -> None: ...
