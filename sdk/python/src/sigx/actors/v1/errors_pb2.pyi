from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_KIND_UNSPECIFIED: _ClassVar[ErrorKind]
    ERROR_KIND_FENCED: _ClassVar[ErrorKind]
    ERROR_KIND_UNPLACEABLE: _ClassVar[ErrorKind]
    ERROR_KIND_UNREACHABLE: _ClassVar[ErrorKind]
    ERROR_KIND_WRONG_HOST: _ClassVar[ErrorKind]
    ERROR_KIND_TIMEOUT: _ClassVar[ErrorKind]
    ERROR_KIND_APP: _ClassVar[ErrorKind]
    ERROR_KIND_ACTIVATION: _ClassVar[ErrorKind]
    ERROR_KIND_INVALID: _ClassVar[ErrorKind]
    ERROR_KIND_UNAUTHENTICATED: _ClassVar[ErrorKind]
    ERROR_KIND_OUTCOME_UNKNOWN: _ClassVar[ErrorKind]
    ERROR_KIND_STALE_EPOCH: _ClassVar[ErrorKind]
ERROR_KIND_UNSPECIFIED: ErrorKind
ERROR_KIND_FENCED: ErrorKind
ERROR_KIND_UNPLACEABLE: ErrorKind
ERROR_KIND_UNREACHABLE: ErrorKind
ERROR_KIND_WRONG_HOST: ErrorKind
ERROR_KIND_TIMEOUT: ErrorKind
ERROR_KIND_APP: ErrorKind
ERROR_KIND_ACTIVATION: ErrorKind
ERROR_KIND_INVALID: ErrorKind
ERROR_KIND_UNAUTHENTICATED: ErrorKind
ERROR_KIND_OUTCOME_UNKNOWN: ErrorKind
ERROR_KIND_STALE_EPOCH: ErrorKind

class ErrorDetail(_message.Message):
    __slots__ = ("kind", "message", "owner_hint", "retry_after_ms", "cause")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OWNER_HINT_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    kind: ErrorKind
    message: str
    owner_hint: str
    retry_after_ms: int
    cause: ErrorDetail
    def __init__(self, kind: _Optional[_Union[ErrorKind, str]] = ..., message: _Optional[str] = ..., owner_hint: _Optional[str] = ..., retry_after_ms: _Optional[int] = ..., cause: _Optional[_Union[ErrorDetail, _Mapping]] = ...) -> None: ...
