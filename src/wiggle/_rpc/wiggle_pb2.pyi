from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterWorkflowRequest(_message.Message):
    __slots__ = ("definition_json",)
    DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    definition_json: bytes
    def __init__(self, definition_json: _Optional[bytes] = ...) -> None: ...

class GetWorkflowRequest(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class WorkflowInfo(_message.Message):
    __slots__ = ("name", "version", "definition_json", "registered_at", "created")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    definition_json: bytes
    registered_at: int
    created: bool
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., definition_json: _Optional[bytes] = ..., registered_at: _Optional[int] = ..., created: _Optional[bool] = ...) -> None: ...

class ListWorkflowsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListWorkflowsResponse(_message.Message):
    __slots__ = ("workflows",)
    WORKFLOWS_FIELD_NUMBER: _ClassVar[int]
    workflows: _containers.RepeatedCompositeFieldContainer[WorkflowInfo]
    def __init__(self, workflows: _Optional[_Iterable[_Union[WorkflowInfo, _Mapping]]] = ...) -> None: ...

class StartInstanceRequest(_message.Message):
    __slots__ = ("workflow", "version", "context_json", "correlation_id", "request_id", "priority", "start_at", "start_delay_millis", "dedup_key", "dedup_window_millis", "timeout_millis")
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_JSON_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    START_AT_FIELD_NUMBER: _ClassVar[int]
    START_DELAY_MILLIS_FIELD_NUMBER: _ClassVar[int]
    DEDUP_KEY_FIELD_NUMBER: _ClassVar[int]
    DEDUP_WINDOW_MILLIS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    workflow: str
    version: str
    context_json: bytes
    correlation_id: str
    request_id: str
    priority: int
    start_at: int
    start_delay_millis: int
    dedup_key: str
    dedup_window_millis: int
    timeout_millis: int
    def __init__(self, workflow: _Optional[str] = ..., version: _Optional[str] = ..., context_json: _Optional[bytes] = ..., correlation_id: _Optional[str] = ..., request_id: _Optional[str] = ..., priority: _Optional[int] = ..., start_at: _Optional[int] = ..., start_delay_millis: _Optional[int] = ..., dedup_key: _Optional[str] = ..., dedup_window_millis: _Optional[int] = ..., timeout_millis: _Optional[int] = ...) -> None: ...

class StartInstancesRequest(_message.Message):
    __slots__ = ("workflow", "version", "contexts_json", "correlation_id", "request_id", "first_index", "priority", "start_at", "start_delay_millis", "timeout_millis", "starts")
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTEXTS_JSON_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    START_AT_FIELD_NUMBER: _ClassVar[int]
    START_DELAY_MILLIS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    STARTS_FIELD_NUMBER: _ClassVar[int]
    workflow: str
    version: str
    contexts_json: _containers.RepeatedScalarFieldContainer[bytes]
    correlation_id: str
    request_id: str
    first_index: int
    priority: int
    start_at: int
    start_delay_millis: int
    timeout_millis: int
    starts: _containers.RepeatedCompositeFieldContainer[StartInstanceRequest]
    def __init__(self, workflow: _Optional[str] = ..., version: _Optional[str] = ..., contexts_json: _Optional[_Iterable[bytes]] = ..., correlation_id: _Optional[str] = ..., request_id: _Optional[str] = ..., first_index: _Optional[int] = ..., priority: _Optional[int] = ..., start_at: _Optional[int] = ..., start_delay_millis: _Optional[int] = ..., timeout_millis: _Optional[int] = ..., starts: _Optional[_Iterable[_Union[StartInstanceRequest, _Mapping]]] = ...) -> None: ...

class StartInstancesResponse(_message.Message):
    __slots__ = ("instance_ids", "version", "results")
    INSTANCE_IDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    instance_ids: _containers.RepeatedScalarFieldContainer[str]
    version: str
    results: _containers.RepeatedCompositeFieldContainer[StartResult]
    def __init__(self, instance_ids: _Optional[_Iterable[str]] = ..., version: _Optional[str] = ..., results: _Optional[_Iterable[_Union[StartResult, _Mapping]]] = ...) -> None: ...

class StartResult(_message.Message):
    __slots__ = ("instance", "error")
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    instance: InstanceInfo
    error: RpcError
    def __init__(self, instance: _Optional[_Union[InstanceInfo, _Mapping]] = ..., error: _Optional[_Union[RpcError, _Mapping]] = ...) -> None: ...

class TokenInfo(_message.Message):
    __slots__ = ("token_id", "node_id", "status", "attempt", "lease_owner", "lease_expires_at", "available_at", "last_error", "local_run_owner", "local_run_steps", "queue", "child_id")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RUN_OWNER_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RUN_STEPS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    CHILD_ID_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    node_id: str
    status: str
    attempt: int
    lease_owner: str
    lease_expires_at: int
    available_at: int
    last_error: str
    local_run_owner: str
    local_run_steps: int
    queue: str
    child_id: str
    def __init__(self, token_id: _Optional[str] = ..., node_id: _Optional[str] = ..., status: _Optional[str] = ..., attempt: _Optional[int] = ..., lease_owner: _Optional[str] = ..., lease_expires_at: _Optional[int] = ..., available_at: _Optional[int] = ..., last_error: _Optional[str] = ..., local_run_owner: _Optional[str] = ..., local_run_steps: _Optional[int] = ..., queue: _Optional[str] = ..., child_id: _Optional[str] = ...) -> None: ...

class InstanceInfo(_message.Message):
    __slots__ = ("instance_id", "workflow", "version", "status", "context_json", "correlation_id", "reason", "error", "created_at", "updated_at", "finished_at", "tokens", "execution_mode", "schedule_id", "schedule_tick_at", "pending_signals", "parent_id", "parent_token_id", "depth", "priority", "start_at", "dedup_key", "dedup_window_millis", "concurrency_key", "concurrency_max", "concurrency_waiting_since", "waiting_reason", "deduplicated")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_JSON_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_MODE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TICK_AT_FIELD_NUMBER: _ClassVar[int]
    PENDING_SIGNALS_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    START_AT_FIELD_NUMBER: _ClassVar[int]
    DEDUP_KEY_FIELD_NUMBER: _ClassVar[int]
    DEDUP_WINDOW_MILLIS_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_MAX_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_WAITING_SINCE_FIELD_NUMBER: _ClassVar[int]
    WAITING_REASON_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    workflow: str
    version: str
    status: str
    context_json: bytes
    correlation_id: str
    reason: str
    error: str
    created_at: int
    updated_at: int
    finished_at: int
    tokens: _containers.RepeatedCompositeFieldContainer[TokenInfo]
    execution_mode: str
    schedule_id: str
    schedule_tick_at: int
    pending_signals: _containers.RepeatedCompositeFieldContainer[PendingSignal]
    parent_id: str
    parent_token_id: str
    depth: int
    priority: int
    start_at: int
    dedup_key: str
    dedup_window_millis: int
    concurrency_key: str
    concurrency_max: int
    concurrency_waiting_since: int
    waiting_reason: str
    deduplicated: bool
    def __init__(self, instance_id: _Optional[str] = ..., workflow: _Optional[str] = ..., version: _Optional[str] = ..., status: _Optional[str] = ..., context_json: _Optional[bytes] = ..., correlation_id: _Optional[str] = ..., reason: _Optional[str] = ..., error: _Optional[str] = ..., created_at: _Optional[int] = ..., updated_at: _Optional[int] = ..., finished_at: _Optional[int] = ..., tokens: _Optional[_Iterable[_Union[TokenInfo, _Mapping]]] = ..., execution_mode: _Optional[str] = ..., schedule_id: _Optional[str] = ..., schedule_tick_at: _Optional[int] = ..., pending_signals: _Optional[_Iterable[_Union[PendingSignal, _Mapping]]] = ..., parent_id: _Optional[str] = ..., parent_token_id: _Optional[str] = ..., depth: _Optional[int] = ..., priority: _Optional[int] = ..., start_at: _Optional[int] = ..., dedup_key: _Optional[str] = ..., dedup_window_millis: _Optional[int] = ..., concurrency_key: _Optional[str] = ..., concurrency_max: _Optional[int] = ..., concurrency_waiting_since: _Optional[int] = ..., waiting_reason: _Optional[str] = ..., deduplicated: _Optional[bool] = ...) -> None: ...

class PendingSignal(_message.Message):
    __slots__ = ("name", "data_json", "signal_id", "sent_at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_ID_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    data_json: bytes
    signal_id: str
    sent_at: int
    def __init__(self, name: _Optional[str] = ..., data_json: _Optional[bytes] = ..., signal_id: _Optional[str] = ..., sent_at: _Optional[int] = ...) -> None: ...

class SignalInstanceRequest(_message.Message):
    __slots__ = ("instance_id", "name", "data_json", "signal_id", "sender")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    name: str
    data_json: bytes
    signal_id: str
    sender: str
    def __init__(self, instance_id: _Optional[str] = ..., name: _Optional[str] = ..., data_json: _Optional[bytes] = ..., signal_id: _Optional[str] = ..., sender: _Optional[str] = ...) -> None: ...

class SignalInstanceResponse(_message.Message):
    __slots__ = ("instance", "outcome")
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    instance: InstanceInfo
    outcome: str
    def __init__(self, instance: _Optional[_Union[InstanceInfo, _Mapping]] = ..., outcome: _Optional[str] = ...) -> None: ...

class RetryInstanceRequest(_message.Message):
    __slots__ = ("instance_id", "from_node", "context_json", "replace_context", "requested_by")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_NODE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_JSON_FIELD_NUMBER: _ClassVar[int]
    REPLACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    from_node: str
    context_json: bytes
    replace_context: bool
    requested_by: str
    def __init__(self, instance_id: _Optional[str] = ..., from_node: _Optional[str] = ..., context_json: _Optional[bytes] = ..., replace_context: _Optional[bool] = ..., requested_by: _Optional[str] = ...) -> None: ...

class GetInstanceRequest(_message.Message):
    __slots__ = ("instance_id", "wait_millis")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    wait_millis: int
    def __init__(self, instance_id: _Optional[str] = ..., wait_millis: _Optional[int] = ...) -> None: ...

class ListInstancesRequest(_message.Message):
    __slots__ = ("workflow", "status", "correlation_id", "created_after", "created_before", "page_size", "page_token", "node", "text", "context", "top_level", "omit_context", "parent_id", "schedule_id")
    class ContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOP_LEVEL_FIELD_NUMBER: _ClassVar[int]
    OMIT_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    workflow: str
    status: str
    correlation_id: str
    created_after: int
    created_before: int
    page_size: int
    page_token: str
    node: str
    text: str
    context: _containers.ScalarMap[str, str]
    top_level: bool
    omit_context: bool
    parent_id: str
    schedule_id: str
    def __init__(self, workflow: _Optional[str] = ..., status: _Optional[str] = ..., correlation_id: _Optional[str] = ..., created_after: _Optional[int] = ..., created_before: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., node: _Optional[str] = ..., text: _Optional[str] = ..., context: _Optional[_Mapping[str, str]] = ..., top_level: _Optional[bool] = ..., omit_context: _Optional[bool] = ..., parent_id: _Optional[str] = ..., schedule_id: _Optional[str] = ...) -> None: ...

class ListInstancesResponse(_message.Message):
    __slots__ = ("instances", "next_page_token")
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    instances: _containers.RepeatedCompositeFieldContainer[InstanceInfo]
    next_page_token: str
    def __init__(self, instances: _Optional[_Iterable[_Union[InstanceInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelInstanceRequest(_message.Message):
    __slots__ = ("instance_id", "reason")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    reason: str
    def __init__(self, instance_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelInstanceResponse(_message.Message):
    __slots__ = ("instance", "changed", "message")
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    instance: InstanceInfo
    changed: bool
    message: str
    def __init__(self, instance: _Optional[_Union[InstanceInfo, _Mapping]] = ..., changed: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class CompleteUserTaskRequest(_message.Message):
    __slots__ = ("instance_id", "task_name", "payload_json")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    task_name: str
    payload_json: bytes
    def __init__(self, instance_id: _Optional[str] = ..., task_name: _Optional[str] = ..., payload_json: _Optional[bytes] = ...) -> None: ...

class GetHistoryRequest(_message.Message):
    __slots__ = ("instance_id",)
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    def __init__(self, instance_id: _Optional[str] = ...) -> None: ...

class HistoryEntry(_message.Message):
    __slots__ = ("token_id", "node_id", "attempt", "worker_id", "started_at", "ended_at", "outcome", "error", "kind", "child_id", "traceback")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CHILD_ID_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    node_id: str
    attempt: int
    worker_id: str
    started_at: int
    ended_at: int
    outcome: str
    error: str
    kind: str
    child_id: str
    traceback: str
    def __init__(self, token_id: _Optional[str] = ..., node_id: _Optional[str] = ..., attempt: _Optional[int] = ..., worker_id: _Optional[str] = ..., started_at: _Optional[int] = ..., ended_at: _Optional[int] = ..., outcome: _Optional[str] = ..., error: _Optional[str] = ..., kind: _Optional[str] = ..., child_id: _Optional[str] = ..., traceback: _Optional[str] = ...) -> None: ...

class GetHistoryResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[HistoryEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[HistoryEntry, _Mapping]]] = ...) -> None: ...

class PollTasksRequest(_message.Message):
    __slots__ = ("worker_id", "queues", "max_tasks", "wait_millis", "worker_session")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MAX_TASKS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    WORKER_SESSION_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    queues: _containers.RepeatedScalarFieldContainer[str]
    max_tasks: int
    wait_millis: int
    worker_session: str
    def __init__(self, worker_id: _Optional[str] = ..., queues: _Optional[_Iterable[str]] = ..., max_tasks: _Optional[int] = ..., wait_millis: _Optional[int] = ..., worker_session: _Optional[str] = ...) -> None: ...

class TaskActivation(_message.Message):
    __slots__ = ("task_id", "instance_id", "workflow", "version", "node_id", "attempt", "context_json", "lease_owner", "lease_expires_at", "queue", "kind", "correlation_id", "execution_mode", "max_local_steps", "lease_millis", "max_payload_bytes", "deadline_at", "traceparent")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_JSON_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_MODE_FIELD_NUMBER: _ClassVar[int]
    MAX_LOCAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MAX_PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_AT_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    instance_id: str
    workflow: str
    version: str
    node_id: str
    attempt: int
    context_json: bytes
    lease_owner: str
    lease_expires_at: int
    queue: str
    kind: str
    correlation_id: str
    execution_mode: str
    max_local_steps: int
    lease_millis: int
    max_payload_bytes: int
    deadline_at: int
    traceparent: str
    def __init__(self, task_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., workflow: _Optional[str] = ..., version: _Optional[str] = ..., node_id: _Optional[str] = ..., attempt: _Optional[int] = ..., context_json: _Optional[bytes] = ..., lease_owner: _Optional[str] = ..., lease_expires_at: _Optional[int] = ..., queue: _Optional[str] = ..., kind: _Optional[str] = ..., correlation_id: _Optional[str] = ..., execution_mode: _Optional[str] = ..., max_local_steps: _Optional[int] = ..., lease_millis: _Optional[int] = ..., max_payload_bytes: _Optional[int] = ..., deadline_at: _Optional[int] = ..., traceparent: _Optional[str] = ...) -> None: ...

class PollTasksResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskActivation]
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskActivation, _Mapping]]] = ...) -> None: ...

class CompleteTaskRequest(_message.Message):
    __slots__ = ("task_id", "lease_owner", "context_json", "predicate_value", "next_queues")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_JSON_FIELD_NUMBER: _ClassVar[int]
    PREDICATE_VALUE_FIELD_NUMBER: _ClassVar[int]
    NEXT_QUEUES_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lease_owner: str
    context_json: bytes
    predicate_value: bool
    next_queues: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, task_id: _Optional[str] = ..., lease_owner: _Optional[str] = ..., context_json: _Optional[bytes] = ..., predicate_value: _Optional[bool] = ..., next_queues: _Optional[_Iterable[str]] = ...) -> None: ...

class FailTaskRequest(_message.Message):
    __slots__ = ("task_id", "lease_owner", "message", "retryable", "release", "traceback")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lease_owner: str
    message: str
    retryable: bool
    release: bool
    traceback: str
    def __init__(self, task_id: _Optional[str] = ..., lease_owner: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ..., release: _Optional[bool] = ..., traceback: _Optional[str] = ...) -> None: ...

class HeartbeatTaskRequest(_message.Message):
    __slots__ = ("task_id", "lease_owner")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lease_owner: str
    def __init__(self, task_id: _Optional[str] = ..., lease_owner: _Optional[str] = ...) -> None: ...

class ReportResult(_message.Message):
    __slots__ = ("instance_status", "lease_expires_at", "next_task")
    INSTANCE_STATUS_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    NEXT_TASK_FIELD_NUMBER: _ClassVar[int]
    instance_status: str
    lease_expires_at: int
    next_task: TaskActivation
    def __init__(self, instance_status: _Optional[str] = ..., lease_expires_at: _Optional[int] = ..., next_task: _Optional[_Union[TaskActivation, _Mapping]] = ...) -> None: ...

class StepFailure(_message.Message):
    __slots__ = ("message", "retryable")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    message: str
    retryable: bool
    def __init__(self, message: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class StepResult(_message.Message):
    __slots__ = ("node_id", "context_json", "predicate_value", "failure")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_JSON_FIELD_NUMBER: _ClassVar[int]
    PREDICATE_VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    context_json: bytes
    predicate_value: bool
    failure: StepFailure
    def __init__(self, node_id: _Optional[str] = ..., context_json: _Optional[bytes] = ..., predicate_value: _Optional[bool] = ..., failure: _Optional[_Union[StepFailure, _Mapping]] = ...) -> None: ...

class AdvanceRunRequest(_message.Message):
    __slots__ = ("task_id", "lease_owner", "steps", "final", "steps_batch", "handback_reason", "run_offset", "failure_traceback", "next_queues", "step_millis")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    STEPS_BATCH_FIELD_NUMBER: _ClassVar[int]
    HANDBACK_REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FAILURE_TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    NEXT_QUEUES_FIELD_NUMBER: _ClassVar[int]
    STEP_MILLIS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lease_owner: str
    steps: _containers.RepeatedCompositeFieldContainer[StepResult]
    final: bool
    steps_batch: bytes
    handback_reason: str
    run_offset: int
    failure_traceback: str
    next_queues: _containers.RepeatedScalarFieldContainer[str]
    step_millis: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, task_id: _Optional[str] = ..., lease_owner: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[StepResult, _Mapping]]] = ..., final: _Optional[bool] = ..., steps_batch: _Optional[bytes] = ..., handback_reason: _Optional[str] = ..., run_offset: _Optional[int] = ..., failure_traceback: _Optional[str] = ..., next_queues: _Optional[_Iterable[str]] = ..., step_millis: _Optional[_Iterable[int]] = ...) -> None: ...

class AdvanceRunResult(_message.Message):
    __slots__ = ("instance_status", "lease_expires_at", "parked_task_id", "token_status", "applied_steps", "next_task")
    INSTANCE_STATUS_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    PARKED_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_STATUS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_STEPS_FIELD_NUMBER: _ClassVar[int]
    NEXT_TASK_FIELD_NUMBER: _ClassVar[int]
    instance_status: str
    lease_expires_at: int
    parked_task_id: str
    token_status: str
    applied_steps: int
    next_task: TaskActivation
    def __init__(self, instance_status: _Optional[str] = ..., lease_expires_at: _Optional[int] = ..., parked_task_id: _Optional[str] = ..., token_status: _Optional[str] = ..., applied_steps: _Optional[int] = ..., next_task: _Optional[_Union[TaskActivation, _Mapping]] = ...) -> None: ...

class RpcError(_message.Message):
    __slots__ = ("code", "message", "not_applied")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NOT_APPLIED_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    not_applied: bool
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., not_applied: _Optional[bool] = ...) -> None: ...

class WorkerMessage(_message.Message):
    __slots__ = ("request_id", "poll", "complete", "fail", "heartbeat", "advance", "cancel")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    POLL_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    FAIL_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    ADVANCE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    poll: PollTasksRequest
    complete: CompleteTaskRequest
    fail: FailTaskRequest
    heartbeat: HeartbeatTaskRequest
    advance: AdvanceRunRequest
    cancel: CancelRequest
    def __init__(self, request_id: _Optional[int] = ..., poll: _Optional[_Union[PollTasksRequest, _Mapping]] = ..., complete: _Optional[_Union[CompleteTaskRequest, _Mapping]] = ..., fail: _Optional[_Union[FailTaskRequest, _Mapping]] = ..., heartbeat: _Optional[_Union[HeartbeatTaskRequest, _Mapping]] = ..., advance: _Optional[_Union[AdvanceRunRequest, _Mapping]] = ..., cancel: _Optional[_Union[CancelRequest, _Mapping]] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    def __init__(self, request_id: _Optional[int] = ...) -> None: ...

class ServerMessage(_message.Message):
    __slots__ = ("request_id", "tasks", "report", "advanced", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    ADVANCED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    tasks: PollTasksResponse
    report: ReportResult
    advanced: AdvanceRunResult
    error: RpcError
    def __init__(self, request_id: _Optional[int] = ..., tasks: _Optional[_Union[PollTasksResponse, _Mapping]] = ..., report: _Optional[_Union[ReportResult, _Mapping]] = ..., advanced: _Optional[_Union[AdvanceRunResult, _Mapping]] = ..., error: _Optional[_Union[RpcError, _Mapping]] = ...) -> None: ...

class WorkerBatch(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[WorkerMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[WorkerMessage, _Mapping]]] = ...) -> None: ...

class ServerBatch(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ServerMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ServerMessage, _Mapping]]] = ...) -> None: ...

class ClientMessage(_message.Message):
    __slots__ = ("request_id", "start")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    start: StartInstancesRequest
    def __init__(self, request_id: _Optional[int] = ..., start: _Optional[_Union[StartInstancesRequest, _Mapping]] = ...) -> None: ...

class ClientReply(_message.Message):
    __slots__ = ("request_id", "started", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    started: StartInstancesResponse
    error: RpcError
    def __init__(self, request_id: _Optional[int] = ..., started: _Optional[_Union[StartInstancesResponse, _Mapping]] = ..., error: _Optional[_Union[RpcError, _Mapping]] = ...) -> None: ...

class ClientBatch(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ClientMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ClientMessage, _Mapping]]] = ...) -> None: ...

class ClientReplyBatch(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ClientReply]
    def __init__(self, messages: _Optional[_Iterable[_Union[ClientReply, _Mapping]]] = ...) -> None: ...

class ScheduleSpec(_message.Message):
    __slots__ = ("id", "workflow", "version", "interval_millis", "cron", "timezone", "context_json", "overlap", "catchup", "catchup_limit", "paused", "priority")
    ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MILLIS_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_JSON_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    id: str
    workflow: str
    version: str
    interval_millis: int
    cron: str
    timezone: str
    context_json: bytes
    overlap: str
    catchup: str
    catchup_limit: int
    paused: bool
    priority: int
    def __init__(self, id: _Optional[str] = ..., workflow: _Optional[str] = ..., version: _Optional[str] = ..., interval_millis: _Optional[int] = ..., cron: _Optional[str] = ..., timezone: _Optional[str] = ..., context_json: _Optional[bytes] = ..., overlap: _Optional[str] = ..., catchup: _Optional[str] = ..., catchup_limit: _Optional[int] = ..., paused: _Optional[bool] = ..., priority: _Optional[int] = ...) -> None: ...

class ScheduleInfo(_message.Message):
    __slots__ = ("spec", "created_at", "updated_at", "next_tick_at", "last_tick_at", "last_instance_id", "buffered_tick_at", "fired", "skipped", "next_fire_times")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    NEXT_TICK_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_TICK_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    BUFFERED_TICK_AT_FIELD_NUMBER: _ClassVar[int]
    FIRED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_TIMES_FIELD_NUMBER: _ClassVar[int]
    spec: ScheduleSpec
    created_at: int
    updated_at: int
    next_tick_at: int
    last_tick_at: int
    last_instance_id: str
    buffered_tick_at: int
    fired: int
    skipped: int
    next_fire_times: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., created_at: _Optional[int] = ..., updated_at: _Optional[int] = ..., next_tick_at: _Optional[int] = ..., last_tick_at: _Optional[int] = ..., last_instance_id: _Optional[str] = ..., buffered_tick_at: _Optional[int] = ..., fired: _Optional[int] = ..., skipped: _Optional[int] = ..., next_fire_times: _Optional[_Iterable[int]] = ...) -> None: ...

class ScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("workflow",)
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    workflow: str
    def __init__(self, workflow: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules",)
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[ScheduleInfo]
    def __init__(self, schedules: _Optional[_Iterable[_Union[ScheduleInfo, _Mapping]]] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueueWorker(_message.Message):
    __slots__ = ("worker_id", "last_seen", "in_flight", "passes_over")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    PASSES_OVER_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    last_seen: int
    in_flight: int
    passes_over: _containers.RepeatedCompositeFieldContainer[PassedOver]
    def __init__(self, worker_id: _Optional[str] = ..., last_seen: _Optional[int] = ..., in_flight: _Optional[int] = ..., passes_over: _Optional[_Iterable[_Union[PassedOver, _Mapping]]] = ...) -> None: ...

class PassedOver(_message.Message):
    __slots__ = ("workflow", "version", "node", "held_until")
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    HELD_UNTIL_FIELD_NUMBER: _ClassVar[int]
    workflow: str
    version: str
    node: str
    held_until: int
    def __init__(self, workflow: _Optional[str] = ..., version: _Optional[str] = ..., node: _Optional[str] = ..., held_until: _Optional[int] = ...) -> None: ...

class QueueInfo(_message.Message):
    __slots__ = ("queue", "ready", "delayed", "oldest_ready_age_millis", "running", "in_local_run", "workers", "limit_held", "limit_waiting", "max_running", "rate_max", "rate_period_millis", "rate_limited_until", "rate_waiting", "rate_waiting_until")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_READY_AGE_MILLIS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    IN_LOCAL_RUN_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_HELD_FIELD_NUMBER: _ClassVar[int]
    LIMIT_WAITING_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_FIELD_NUMBER: _ClassVar[int]
    RATE_MAX_FIELD_NUMBER: _ClassVar[int]
    RATE_PERIOD_MILLIS_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITED_UNTIL_FIELD_NUMBER: _ClassVar[int]
    RATE_WAITING_FIELD_NUMBER: _ClassVar[int]
    RATE_WAITING_UNTIL_FIELD_NUMBER: _ClassVar[int]
    queue: str
    ready: int
    delayed: int
    oldest_ready_age_millis: int
    running: int
    in_local_run: int
    workers: _containers.RepeatedCompositeFieldContainer[QueueWorker]
    limit_held: int
    limit_waiting: int
    max_running: int
    rate_max: int
    rate_period_millis: int
    rate_limited_until: int
    rate_waiting: int
    rate_waiting_until: int
    def __init__(self, queue: _Optional[str] = ..., ready: _Optional[int] = ..., delayed: _Optional[int] = ..., oldest_ready_age_millis: _Optional[int] = ..., running: _Optional[int] = ..., in_local_run: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[QueueWorker, _Mapping]]] = ..., limit_held: _Optional[int] = ..., limit_waiting: _Optional[int] = ..., max_running: _Optional[int] = ..., rate_max: _Optional[int] = ..., rate_period_millis: _Optional[int] = ..., rate_limited_until: _Optional[int] = ..., rate_waiting: _Optional[int] = ..., rate_waiting_until: _Optional[int] = ...) -> None: ...

class QueueLimit(_message.Message):
    __slots__ = ("queue", "max_running", "rate_max", "rate_period_millis")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_FIELD_NUMBER: _ClassVar[int]
    RATE_MAX_FIELD_NUMBER: _ClassVar[int]
    RATE_PERIOD_MILLIS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    max_running: int
    rate_max: int
    rate_period_millis: int
    def __init__(self, queue: _Optional[str] = ..., max_running: _Optional[int] = ..., rate_max: _Optional[int] = ..., rate_period_millis: _Optional[int] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues", "now")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueInfo]
    now: int
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueInfo, _Mapping]]] = ..., now: _Optional[int] = ...) -> None: ...
