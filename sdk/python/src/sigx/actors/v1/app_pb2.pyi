from sigx.actors.v1 import errors_pb2 as _errors_pb2
from sigx.actors.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeactivateReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEACTIVATE_REASON_UNSPECIFIED: _ClassVar[DeactivateReason]
    DEACTIVATE_REASON_IDLE: _ClassVar[DeactivateReason]
    DEACTIVATE_REASON_SHUTDOWN: _ClassVar[DeactivateReason]
    DEACTIVATE_REASON_SUPERSEDED: _ClassVar[DeactivateReason]

class Locality(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOCALITY_ANY: _ClassVar[Locality]
    LOCALITY_SAME_NODE: _ClassVar[Locality]
    LOCALITY_SAME_ZONE: _ClassVar[Locality]

class MemberStatusFilter(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBER_STATUS_FILTER_ACTIVE: _ClassVar[MemberStatusFilter]
    MEMBER_STATUS_FILTER_ANY: _ClassVar[MemberStatusFilter]
DEACTIVATE_REASON_UNSPECIFIED: DeactivateReason
DEACTIVATE_REASON_IDLE: DeactivateReason
DEACTIVATE_REASON_SHUTDOWN: DeactivateReason
DEACTIVATE_REASON_SUPERSEDED: DeactivateReason
LOCALITY_ANY: Locality
LOCALITY_SAME_NODE: Locality
LOCALITY_SAME_ZONE: Locality
MEMBER_STATUS_FILTER_ACTIVE: MemberStatusFilter
MEMBER_STATUS_FILTER_ANY: MemberStatusFilter

class LocateRequest(_message.Message):
    __slots__ = ("actor", "timeout_ms")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    actor: _types_pb2.ActorRef
    timeout_ms: int
    def __init__(self, actor: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class LocateResponse(_message.Message):
    __slots__ = ("active", "host_id", "activation_id", "epoch")
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    active: bool
    host_id: str
    activation_id: str
    epoch: int
    def __init__(self, active: _Optional[bool] = ..., host_id: _Optional[str] = ..., activation_id: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class ListActorsRequest(_message.Message):
    __slots__ = ("actor_type", "page_size", "page_token", "timeout_ms", "with_reminders")
    ACTOR_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    WITH_REMINDERS_FIELD_NUMBER: _ClassVar[int]
    actor_type: str
    page_size: int
    page_token: str
    timeout_ms: int
    with_reminders: bool
    def __init__(self, actor_type: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., with_reminders: _Optional[bool] = ...) -> None: ...

class ListActorsResponse(_message.Message):
    __slots__ = ("actors", "next_page_token", "incomplete", "skipped")
    ACTORS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCOMPLETE_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    actors: _containers.RepeatedCompositeFieldContainer[ActorLocation]
    next_page_token: str
    incomplete: bool
    skipped: _containers.RepeatedCompositeFieldContainer[SkippedPartitions]
    def __init__(self, actors: _Optional[_Iterable[_Union[ActorLocation, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., incomplete: _Optional[bool] = ..., skipped: _Optional[_Iterable[_Union[SkippedPartitions, _Mapping]]] = ...) -> None: ...

class ActorLocation(_message.Message):
    __slots__ = ("actor", "host_id", "activation_id", "reminders")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_ID_FIELD_NUMBER: _ClassVar[int]
    REMINDERS_FIELD_NUMBER: _ClassVar[int]
    actor: _types_pb2.ActorRef
    host_id: str
    activation_id: str
    reminders: _containers.RepeatedCompositeFieldContainer[ReminderInfo]
    def __init__(self, actor: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ..., host_id: _Optional[str] = ..., activation_id: _Optional[str] = ..., reminders: _Optional[_Iterable[_Union[ReminderInfo, _Mapping]]] = ...) -> None: ...

class SkippedPartitions(_message.Message):
    __slots__ = ("owner", "reason", "partitions")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    owner: str
    reason: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, owner: _Optional[str] = ..., reason: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class SetTimerRequest(_message.Message):
    __slots__ = ("actor", "activation_id", "name", "due_ms", "period_ms", "payload")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DUE_MS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    actor: _types_pb2.ActorRef
    activation_id: str
    name: str
    due_ms: int
    period_ms: int
    payload: bytes
    def __init__(self, actor: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ..., activation_id: _Optional[str] = ..., name: _Optional[str] = ..., due_ms: _Optional[int] = ..., period_ms: _Optional[int] = ..., payload: _Optional[bytes] = ...) -> None: ...

class SetTimerResponse(_message.Message):
    __slots__ = ("replaced",)
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    replaced: bool
    def __init__(self, replaced: _Optional[bool] = ...) -> None: ...

class CancelTimerRequest(_message.Message):
    __slots__ = ("actor", "activation_id", "name")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    actor: _types_pb2.ActorRef
    activation_id: str
    name: str
    def __init__(self, actor: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ..., activation_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class CancelTimerResponse(_message.Message):
    __slots__ = ("existed",)
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    def __init__(self, existed: _Optional[bool] = ...) -> None: ...

class SetReminderRequest(_message.Message):
    __slots__ = ("actor", "name", "due_unix_ms", "due_in_ms", "period_ms", "payload", "epoch")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DUE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    DUE_IN_MS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    actor: _types_pb2.ActorRef
    name: str
    due_unix_ms: int
    due_in_ms: int
    period_ms: int
    payload: bytes
    epoch: int
    def __init__(self, actor: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ..., name: _Optional[str] = ..., due_unix_ms: _Optional[int] = ..., due_in_ms: _Optional[int] = ..., period_ms: _Optional[int] = ..., payload: _Optional[bytes] = ..., epoch: _Optional[int] = ...) -> None: ...

class SetReminderResponse(_message.Message):
    __slots__ = ("due_unix_ms",)
    DUE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    due_unix_ms: int
    def __init__(self, due_unix_ms: _Optional[int] = ...) -> None: ...

class DeleteReminderRequest(_message.Message):
    __slots__ = ("actor", "name", "epoch")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    actor: _types_pb2.ActorRef
    name: str
    epoch: int
    def __init__(self, actor: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ..., name: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class DeleteReminderResponse(_message.Message):
    __slots__ = ("existed",)
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    def __init__(self, existed: _Optional[bool] = ...) -> None: ...

class ListRemindersRequest(_message.Message):
    __slots__ = ("actor",)
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    actor: _types_pb2.ActorRef
    def __init__(self, actor: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ...) -> None: ...

class ListRemindersResponse(_message.Message):
    __slots__ = ("reminders",)
    REMINDERS_FIELD_NUMBER: _ClassVar[int]
    reminders: _containers.RepeatedCompositeFieldContainer[ReminderInfo]
    def __init__(self, reminders: _Optional[_Iterable[_Union[ReminderInfo, _Mapping]]] = ...) -> None: ...

class ReminderInfo(_message.Message):
    __slots__ = ("name", "due_unix_ms", "period_ms", "payload", "failed_attempts")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DUE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    FAILED_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    due_unix_ms: int
    period_ms: int
    payload: bytes
    failed_attempts: int
    def __init__(self, name: _Optional[str] = ..., due_unix_ms: _Optional[int] = ..., period_ms: _Optional[int] = ..., payload: _Optional[bytes] = ..., failed_attempts: _Optional[int] = ...) -> None: ...

class ReadStateRequest(_message.Message):
    __slots__ = ("actor", "activation_id", "epoch", "keys", "all")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    actor: _types_pb2.ActorRef
    activation_id: str
    epoch: int
    keys: _containers.RepeatedScalarFieldContainer[str]
    all: bool
    def __init__(self, actor: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ..., activation_id: _Optional[str] = ..., epoch: _Optional[int] = ..., keys: _Optional[_Iterable[str]] = ..., all: _Optional[bool] = ...) -> None: ...

class ReadStateResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[StateEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[StateEntry, _Mapping]]] = ...) -> None: ...

class StateEntry(_message.Message):
    __slots__ = ("key", "found", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    found: bool
    value: bytes
    def __init__(self, key: _Optional[str] = ..., found: _Optional[bool] = ..., value: _Optional[bytes] = ...) -> None: ...

class StateWrite(_message.Message):
    __slots__ = ("key", "put", "delete")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    key: str
    put: bytes
    delete: bool
    def __init__(self, key: _Optional[str] = ..., put: _Optional[bytes] = ..., delete: _Optional[bool] = ...) -> None: ...

class AppMessage(_message.Message):
    __slots__ = ("register", "result", "drain")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    register: Register
    result: TurnResult
    drain: Drain
    def __init__(self, register: _Optional[_Union[Register, _Mapping]] = ..., result: _Optional[_Union[TurnResult, _Mapping]] = ..., drain: _Optional[_Union[Drain, _Mapping]] = ...) -> None: ...

class Drain(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Register(_message.Message):
    __slots__ = ("actors", "workers", "app_name")
    ACTORS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    actors: _containers.RepeatedCompositeFieldContainer[ActorTypeSpec]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerTypeSpec]
    app_name: str
    def __init__(self, actors: _Optional[_Iterable[_Union[ActorTypeSpec, _Mapping]]] = ..., workers: _Optional[_Iterable[_Union[WorkerTypeSpec, _Mapping]]] = ..., app_name: _Optional[str] = ...) -> None: ...

class ActorTypeSpec(_message.Message):
    __slots__ = ("name", "reentrant", "idle_timeout_ms", "methods")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REENTRANT_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    METHODS_FIELD_NUMBER: _ClassVar[int]
    name: str
    reentrant: bool
    idle_timeout_ms: int
    methods: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., reentrant: _Optional[bool] = ..., idle_timeout_ms: _Optional[int] = ..., methods: _Optional[_Iterable[str]] = ...) -> None: ...

class WorkerTypeSpec(_message.Message):
    __slots__ = ("name", "max_concurrency", "methods")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    METHODS_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_concurrency: int
    methods: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., max_concurrency: _Optional[int] = ..., methods: _Optional[_Iterable[str]] = ...) -> None: ...

class SidecarMessage(_message.Message):
    __slots__ = ("registered", "turn", "fenced")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    registered: Registered
    turn: Turn
    fenced: FenceNotice
    def __init__(self, registered: _Optional[_Union[Registered, _Mapping]] = ..., turn: _Optional[_Union[Turn, _Mapping]] = ..., fenced: _Optional[_Union[FenceNotice, _Mapping]] = ...) -> None: ...

class FenceNotice(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("host_id", "max_payload_bytes")
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    host_id: str
    max_payload_bytes: int
    def __init__(self, host_id: _Optional[str] = ..., max_payload_bytes: _Optional[int] = ...) -> None: ...

class Turn(_message.Message):
    __slots__ = ("turn_id", "actor", "activation_id", "timeout_ms", "not_after_unix_ms", "not_after_boot_ms", "epoch", "trace", "activate", "invoke", "deactivate", "reminder", "timer")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    NOT_AFTER_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    NOT_AFTER_BOOT_MS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    ACTIVATE_FIELD_NUMBER: _ClassVar[int]
    INVOKE_FIELD_NUMBER: _ClassVar[int]
    DEACTIVATE_FIELD_NUMBER: _ClassVar[int]
    REMINDER_FIELD_NUMBER: _ClassVar[int]
    TIMER_FIELD_NUMBER: _ClassVar[int]
    turn_id: int
    actor: _types_pb2.ActorRef
    activation_id: str
    timeout_ms: int
    not_after_unix_ms: int
    not_after_boot_ms: int
    epoch: int
    trace: _types_pb2.TraceContext
    activate: Activate
    invoke: Invoke
    deactivate: Deactivate
    reminder: Reminder
    timer: TimerTick
    def __init__(self, turn_id: _Optional[int] = ..., actor: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ..., activation_id: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., not_after_unix_ms: _Optional[int] = ..., not_after_boot_ms: _Optional[int] = ..., epoch: _Optional[int] = ..., trace: _Optional[_Union[_types_pb2.TraceContext, _Mapping]] = ..., activate: _Optional[_Union[Activate, _Mapping]] = ..., invoke: _Optional[_Union[Invoke, _Mapping]] = ..., deactivate: _Optional[_Union[Deactivate, _Mapping]] = ..., reminder: _Optional[_Union[Reminder, _Mapping]] = ..., timer: _Optional[_Union[TimerTick, _Mapping]] = ...) -> None: ...

class TimerTick(_message.Message):
    __slots__ = ("name", "payload", "period_ms", "due_unix_ms", "skipped")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    DUE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    name: str
    payload: bytes
    period_ms: int
    due_unix_ms: int
    skipped: int
    def __init__(self, name: _Optional[str] = ..., payload: _Optional[bytes] = ..., period_ms: _Optional[int] = ..., due_unix_ms: _Optional[int] = ..., skipped: _Optional[int] = ...) -> None: ...

class Reminder(_message.Message):
    __slots__ = ("name", "payload", "due_unix_ms", "period_ms", "attempt")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DUE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    name: str
    payload: bytes
    due_unix_ms: int
    period_ms: int
    attempt: int
    def __init__(self, name: _Optional[str] = ..., payload: _Optional[bytes] = ..., due_unix_ms: _Optional[int] = ..., period_ms: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class Activate(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Invoke(_message.Message):
    __slots__ = ("method", "payload")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    method: str
    payload: bytes
    def __init__(self, method: _Optional[str] = ..., payload: _Optional[bytes] = ...) -> None: ...

class Deactivate(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: DeactivateReason
    def __init__(self, reason: _Optional[_Union[DeactivateReason, str]] = ...) -> None: ...

class TurnResult(_message.Message):
    __slots__ = ("turn_id", "ok", "error", "writes")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    turn_id: int
    ok: bytes
    error: TurnError
    writes: _containers.RepeatedCompositeFieldContainer[StateWrite]
    def __init__(self, turn_id: _Optional[int] = ..., ok: _Optional[bytes] = ..., error: _Optional[_Union[TurnError, _Mapping]] = ..., writes: _Optional[_Iterable[_Union[StateWrite, _Mapping]]] = ...) -> None: ...

class TurnError(_message.Message):
    __slots__ = ("kind", "message")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    kind: _errors_pb2.ErrorKind
    message: str
    def __init__(self, kind: _Optional[_Union[_errors_pb2.ErrorKind, str]] = ..., message: _Optional[str] = ...) -> None: ...

class CallRequest(_message.Message):
    __slots__ = ("actor", "method", "payload", "timeout_ms", "trace", "locality")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    LOCALITY_FIELD_NUMBER: _ClassVar[int]
    actor: _types_pb2.ActorRef
    method: str
    payload: bytes
    timeout_ms: int
    trace: _types_pb2.TraceContext
    locality: Locality
    def __init__(self, actor: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ..., method: _Optional[str] = ..., payload: _Optional[bytes] = ..., timeout_ms: _Optional[int] = ..., trace: _Optional[_Union[_types_pb2.TraceContext, _Mapping]] = ..., locality: _Optional[_Union[Locality, str]] = ...) -> None: ...

class CallResponse(_message.Message):
    __slots__ = ("payload",)
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    def __init__(self, payload: _Optional[bytes] = ...) -> None: ...

class MembersRequest(_message.Message):
    __slots__ = ("status", "registers")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REGISTERS_FIELD_NUMBER: _ClassVar[int]
    status: MemberStatusFilter
    registers: str
    def __init__(self, status: _Optional[_Union[MemberStatusFilter, str]] = ..., registers: _Optional[str] = ...) -> None: ...

class MembersResponse(_message.Message):
    __slots__ = ("version", "hosts")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    version: int
    hosts: _containers.RepeatedCompositeFieldContainer[_types_pb2.HostDescriptor]
    def __init__(self, version: _Optional[int] = ..., hosts: _Optional[_Iterable[_Union[_types_pb2.HostDescriptor, _Mapping]]] = ...) -> None: ...

class DispatchOnRequest(_message.Message):
    __slots__ = ("host_id", "worker", "method", "payload", "timeout_ms")
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    host_id: str
    worker: _types_pb2.ActorRef
    method: str
    payload: bytes
    timeout_ms: int
    def __init__(self, host_id: _Optional[str] = ..., worker: _Optional[_Union[_types_pb2.ActorRef, _Mapping]] = ..., method: _Optional[str] = ..., payload: _Optional[bytes] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TypeActivations(_message.Message):
    __slots__ = ("actor_type", "activations")
    ACTOR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ACTIVATIONS_FIELD_NUMBER: _ClassVar[int]
    actor_type: str
    activations: int
    def __init__(self, actor_type: _Optional[str] = ..., activations: _Optional[int] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("host", "state", "fence_reason", "app_connected", "activations", "counters", "view")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    HOST_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FENCE_REASON_FIELD_NUMBER: _ClassVar[int]
    APP_CONNECTED_FIELD_NUMBER: _ClassVar[int]
    ACTIVATIONS_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    host: _types_pb2.HostDescriptor
    state: str
    fence_reason: str
    app_connected: bool
    activations: _containers.RepeatedCompositeFieldContainer[TypeActivations]
    counters: _containers.ScalarMap[str, int]
    view: MembersResponse
    def __init__(self, host: _Optional[_Union[_types_pb2.HostDescriptor, _Mapping]] = ..., state: _Optional[str] = ..., fence_reason: _Optional[str] = ..., app_connected: _Optional[bool] = ..., activations: _Optional[_Iterable[_Union[TypeActivations, _Mapping]]] = ..., counters: _Optional[_Mapping[str, int]] = ..., view: _Optional[_Union[MembersResponse, _Mapping]] = ...) -> None: ...
