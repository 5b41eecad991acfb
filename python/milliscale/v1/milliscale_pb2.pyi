from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Isolation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ISOLATION_UNSPECIFIED: _ClassVar[Isolation]
    ISOLATION_READ_COMMITTED: _ClassVar[Isolation]
    ISOLATION_SNAPSHOT: _ClassVar[Isolation]
    ISOLATION_SERIALIZABLE: _ClassVar[Isolation]

class ReadAt(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READ_AT_LATEST: _ClassVar[ReadAt]
    READ_AT_DURABLE: _ClassVar[ReadAt]

class Durability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DURABILITY_WAIT: _ClassVar[Durability]
    DURABILITY_PRECOMMIT: _ClassVar[Durability]
ISOLATION_UNSPECIFIED: Isolation
ISOLATION_READ_COMMITTED: Isolation
ISOLATION_SNAPSHOT: Isolation
ISOLATION_SERIALIZABLE: Isolation
READ_AT_LATEST: ReadAt
READ_AT_DURABLE: ReadAt
DURABILITY_WAIT: Durability
DURABILITY_PRECOMMIT: Durability

class CreateTableRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateTableResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DropTableRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DropTableResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTablesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTablesResponse(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class BeginRequest(_message.Message):
    __slots__ = ("isolation", "read_only", "read_at", "at_token", "wait_ms")
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    READ_AT_FIELD_NUMBER: _ClassVar[int]
    AT_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    isolation: Isolation
    read_only: bool
    read_at: ReadAt
    at_token: int
    wait_ms: int
    def __init__(self, isolation: _Optional[_Union[Isolation, str]] = ..., read_only: _Optional[bool] = ..., read_at: _Optional[_Union[ReadAt, str]] = ..., at_token: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class BeginResponse(_message.Message):
    __slots__ = ("txn_id", "snapshot", "isolation")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    txn_id: int
    snapshot: int
    isolation: Isolation
    def __init__(self, txn_id: _Optional[int] = ..., snapshot: _Optional[int] = ..., isolation: _Optional[_Union[Isolation, str]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("txn_id", "table", "key")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    txn_id: int
    table: str
    key: bytes
    def __init__(self, txn_id: _Optional[int] = ..., table: _Optional[str] = ..., key: _Optional[bytes] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: bytes
    def __init__(self, value: _Optional[bytes] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("txn_id", "table", "key", "value")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    txn_id: int
    table: str
    key: bytes
    value: bytes
    def __init__(self, txn_id: _Optional[int] = ..., table: _Optional[str] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ...) -> None: ...

class PutResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("txn_id", "table", "key")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    txn_id: int
    table: str
    key: bytes
    def __init__(self, txn_id: _Optional[int] = ..., table: _Optional[str] = ..., key: _Optional[bytes] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ("existed",)
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    def __init__(self, existed: _Optional[bool] = ...) -> None: ...

class PatchRequest(_message.Message):
    __slots__ = ("txn_id", "table", "key", "offset", "bytes")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    txn_id: int
    table: str
    key: bytes
    offset: int
    bytes: bytes
    def __init__(self, txn_id: _Optional[int] = ..., table: _Optional[str] = ..., key: _Optional[bytes] = ..., offset: _Optional[int] = ..., bytes: _Optional[bytes] = ...) -> None: ...

class PatchResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class KeyRange(_message.Message):
    __slots__ = ("start", "end", "prefix", "reverse", "limit")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    REVERSE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    start: bytes
    end: bytes
    prefix: bytes
    reverse: bool
    limit: int
    def __init__(self, start: _Optional[bytes] = ..., end: _Optional[bytes] = ..., prefix: _Optional[bytes] = ..., reverse: _Optional[bool] = ..., limit: _Optional[int] = ...) -> None: ...

class ScanRequest(_message.Message):
    __slots__ = ("txn_id", "table", "range")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    txn_id: int
    table: str
    range: KeyRange
    def __init__(self, txn_id: _Optional[int] = ..., table: _Optional[str] = ..., range: _Optional[_Union[KeyRange, _Mapping]] = ...) -> None: ...

class Row(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: bytes
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[bytes] = ...) -> None: ...

class ScanResponse(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[Row]
    def __init__(self, rows: _Optional[_Iterable[_Union[Row, _Mapping]]] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("txn_id", "durability")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    txn_id: int
    durability: Durability
    def __init__(self, txn_id: _Optional[int] = ..., durability: _Optional[_Union[Durability, str]] = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ("token", "durable")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    token: int
    durable: bool
    def __init__(self, token: _Optional[int] = ..., durable: _Optional[bool] = ...) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("txn_id",)
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    txn_id: int
    def __init__(self, txn_id: _Optional[int] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Operation(_message.Message):
    __slots__ = ("table", "get", "put", "delete", "scan", "patch")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    SCAN_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    table: str
    get: bytes
    put: Row
    delete: bytes
    scan: KeyRange
    patch: PatchRequest
    def __init__(self, table: _Optional[str] = ..., get: _Optional[bytes] = ..., put: _Optional[_Union[Row, _Mapping]] = ..., delete: _Optional[bytes] = ..., scan: _Optional[_Union[KeyRange, _Mapping]] = ..., patch: _Optional[_Union[PatchRequest, _Mapping]] = ...) -> None: ...

class OperationResult(_message.Message):
    __slots__ = ("get", "put", "delete", "scan", "patch")
    GET_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    SCAN_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    get: GetResponse
    put: PutResponse
    delete: DeleteResponse
    scan: ScanResponse
    patch: PatchResponse
    def __init__(self, get: _Optional[_Union[GetResponse, _Mapping]] = ..., put: _Optional[_Union[PutResponse, _Mapping]] = ..., delete: _Optional[_Union[DeleteResponse, _Mapping]] = ..., scan: _Optional[_Union[ScanResponse, _Mapping]] = ..., patch: _Optional[_Union[PatchResponse, _Mapping]] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("operations", "isolation", "durability", "read_at", "at_token", "wait_ms", "max_retries", "table")
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    READ_AT_FIELD_NUMBER: _ClassVar[int]
    AT_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    operations: _containers.RepeatedCompositeFieldContainer[Operation]
    isolation: Isolation
    durability: Durability
    read_at: ReadAt
    at_token: int
    wait_ms: int
    max_retries: int
    table: str
    def __init__(self, operations: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., isolation: _Optional[_Union[Isolation, str]] = ..., durability: _Optional[_Union[Durability, str]] = ..., read_at: _Optional[_Union[ReadAt, str]] = ..., at_token: _Optional[int] = ..., wait_ms: _Optional[int] = ..., max_retries: _Optional[int] = ..., table: _Optional[str] = ...) -> None: ...

class ExecuteResponse(_message.Message):
    __slots__ = ("results", "token", "durable", "attempts")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[OperationResult]
    token: int
    durable: bool
    attempts: int
    def __init__(self, results: _Optional[_Iterable[_Union[OperationResult, _Mapping]]] = ..., token: _Optional[int] = ..., durable: _Optional[bool] = ..., attempts: _Optional[int] = ...) -> None: ...

class ExecuteStreamRequest(_message.Message):
    __slots__ = ("id", "request", "notify_durable")
    ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_DURABLE_FIELD_NUMBER: _ClassVar[int]
    id: int
    request: ExecuteRequest
    notify_durable: bool
    def __init__(self, id: _Optional[int] = ..., request: _Optional[_Union[ExecuteRequest, _Mapping]] = ..., notify_durable: _Optional[bool] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("code", "message", "kind", "retryable")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    kind: str
    retryable: bool
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., kind: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class Durable(_message.Message):
    __slots__ = ("ids", "failure")
    IDS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    failure: Failure
    def __init__(self, ids: _Optional[_Iterable[int]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ...) -> None: ...

class ExecuteStreamResponse(_message.Message):
    __slots__ = ("id", "done", "failure", "durable")
    ID_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    id: int
    done: ExecuteResponse
    failure: Failure
    durable: Durable
    def __init__(self, id: _Optional[int] = ..., done: _Optional[_Union[ExecuteResponse, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ..., durable: _Optional[_Union[Durable, _Mapping]] = ...) -> None: ...

class WaitForRequest(_message.Message):
    __slots__ = ("token", "wait_ms")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    token: int
    wait_ms: int
    def __init__(self, token: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class WaitForResponse(_message.Message):
    __slots__ = ("reached",)
    REACHED_FIELD_NUMBER: _ClassVar[int]
    reached: int
    def __init__(self, reached: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("role", "durable_token", "open_transactions", "version", "cpu_seconds")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    DURABLE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OPEN_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    role: str
    durable_token: int
    open_transactions: int
    version: str
    cpu_seconds: float
    def __init__(self, role: _Optional[str] = ..., durable_token: _Optional[int] = ..., open_transactions: _Optional[int] = ..., version: _Optional[str] = ..., cpu_seconds: _Optional[float] = ...) -> None: ...
