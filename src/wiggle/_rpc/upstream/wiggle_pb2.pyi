from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Ack(_message.Message):
    __slots__ = ("ok",)
    OK_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    def __init__(self, ok: _Optional[bool] = ...) -> None: ...

class HealthStatus(_message.Message):
    __slots__ = ("status", "node", "leader")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    status: str
    node: str
    leader: bool
    def __init__(self, status: _Optional[str] = ..., node: _Optional[str] = ..., leader: _Optional[bool] = ...) -> None: ...

class ClusterMember(_message.Message):
    __slots__ = ("id", "name", "first_heartbeat", "last_heartbeat", "workers", "leader", "alive")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FIRST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    first_heartbeat: int
    last_heartbeat: int
    workers: int
    leader: bool
    alive: bool
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., first_heartbeat: _Optional[int] = ..., last_heartbeat: _Optional[int] = ..., workers: _Optional[int] = ..., leader: _Optional[bool] = ..., alive: _Optional[bool] = ...) -> None: ...

class ClusterView(_message.Message):
    __slots__ = ("self", "leader", "members")
    SELF_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    self: str
    leader: bool
    members: _containers.RepeatedCompositeFieldContainer[ClusterMember]
    def __init__(self_, self: _Optional[str] = ..., leader: _Optional[bool] = ..., members: _Optional[_Iterable[_Union[ClusterMember, _Mapping]]] = ...) -> None: ...

class WorkflowDefinition(_message.Message):
    __slots__ = ("definition",)
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    definition: _struct_pb2.Struct
    def __init__(self, definition: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class WorkflowNames(_message.Message):
    __slots__ = ("workflows",)
    WORKFLOWS_FIELD_NUMBER: _ClassVar[int]
    workflows: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, workflows: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterWorkflowResult(_message.Message):
    __slots__ = ("name", "version", "nodes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    nodes: int
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., nodes: _Optional[int] = ...) -> None: ...

class GetWorkflowRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class StartInstanceRequest(_message.Message):
    __slots__ = ("workflow", "context", "version", "correlation_id")
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    workflow: str
    context: _struct_pb2.Value
    version: int
    correlation_id: str
    def __init__(self, workflow: _Optional[str] = ..., context: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., version: _Optional[int] = ..., correlation_id: _Optional[str] = ...) -> None: ...

class StartInstanceResult(_message.Message):
    __slots__ = ("instance_id", "workflow")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    workflow: str
    def __init__(self, instance_id: _Optional[str] = ..., workflow: _Optional[str] = ...) -> None: ...

class InstanceView(_message.Message):
    __slots__ = ("id", "workflow", "version", "status", "termination_reason", "error", "context", "created_at", "updated_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TERMINATION_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    workflow: str
    version: int
    status: str
    termination_reason: str
    error: str
    context: _struct_pb2.Value
    created_at: int
    updated_at: int
    def __init__(self, id: _Optional[str] = ..., workflow: _Optional[str] = ..., version: _Optional[int] = ..., status: _Optional[str] = ..., termination_reason: _Optional[str] = ..., error: _Optional[str] = ..., context: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., created_at: _Optional[int] = ..., updated_at: _Optional[int] = ...) -> None: ...

class Token(_message.Message):
    __slots__ = ("id", "node_id", "kind", "status", "activity", "attempt", "available_at", "lease_owner", "last_error")
    ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_AT_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    node_id: str
    kind: str
    status: str
    activity: str
    attempt: int
    available_at: int
    lease_owner: str
    last_error: str
    def __init__(self, id: _Optional[str] = ..., node_id: _Optional[str] = ..., kind: _Optional[str] = ..., status: _Optional[str] = ..., activity: _Optional[str] = ..., attempt: _Optional[int] = ..., available_at: _Optional[int] = ..., lease_owner: _Optional[str] = ..., last_error: _Optional[str] = ...) -> None: ...

class InstanceDetail(_message.Message):
    __slots__ = ("instance", "tokens")
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    instance: InstanceView
    tokens: _containers.RepeatedCompositeFieldContainer[Token]
    def __init__(self, instance: _Optional[_Union[InstanceView, _Mapping]] = ..., tokens: _Optional[_Iterable[_Union[Token, _Mapping]]] = ...) -> None: ...

class ListInstancesRequest(_message.Message):
    __slots__ = ("workflow", "status", "limit")
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    workflow: str
    status: str
    limit: int
    def __init__(self, workflow: _Optional[str] = ..., status: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class InstanceList(_message.Message):
    __slots__ = ("instances",)
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    instances: _containers.RepeatedCompositeFieldContainer[InstanceView]
    def __init__(self, instances: _Optional[_Iterable[_Union[InstanceView, _Mapping]]] = ...) -> None: ...

class InstanceIdRequest(_message.Message):
    __slots__ = ("instance_id",)
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    def __init__(self, instance_id: _Optional[str] = ...) -> None: ...

class CancelInstanceRequest(_message.Message):
    __slots__ = ("instance_id", "reason")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    reason: str
    def __init__(self, instance_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class SignalRequest(_message.Message):
    __slots__ = ("instance_id", "signal", "payload")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    signal: str
    payload: _struct_pb2.Value
    def __init__(self, instance_id: _Optional[str] = ..., signal: _Optional[str] = ..., payload: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ("workflow", "every_millis", "cron", "context")
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    EVERY_MILLIS_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    workflow: str
    every_millis: int
    cron: str
    context: _struct_pb2.Value
    def __init__(self, workflow: _Optional[str] = ..., every_millis: _Optional[int] = ..., cron: _Optional[str] = ..., context: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class ScheduleView(_message.Message):
    __slots__ = ("id", "workflow", "every_millis", "cron", "next_fire_at", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    EVERY_MILLIS_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    workflow: str
    every_millis: int
    cron: str
    next_fire_at: int
    created_at: int
    def __init__(self, id: _Optional[str] = ..., workflow: _Optional[str] = ..., every_millis: _Optional[int] = ..., cron: _Optional[str] = ..., next_fire_at: _Optional[int] = ..., created_at: _Optional[int] = ...) -> None: ...

class ScheduleList(_message.Message):
    __slots__ = ("schedules",)
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[ScheduleView]
    def __init__(self, schedules: _Optional[_Iterable[_Union[ScheduleView, _Mapping]]] = ...) -> None: ...

class ScheduleIdRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class CancelInstanceResult(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: str
    def __init__(self, cancelled: _Optional[str] = ...) -> None: ...

class PollRequest(_message.Message):
    __slots__ = ("worker_id", "queues", "max", "lease_millis", "wait_millis")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    LEASE_MILLIS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    queues: _containers.RepeatedScalarFieldContainer[str]
    max: int
    lease_millis: int
    wait_millis: int
    def __init__(self, worker_id: _Optional[str] = ..., queues: _Optional[_Iterable[str]] = ..., max: _Optional[int] = ..., lease_millis: _Optional[int] = ..., wait_millis: _Optional[int] = ...) -> None: ...

class TaskActivation(_message.Message):
    __slots__ = ("task_id", "instance_id", "workflow", "version", "node_id", "step_name", "activity", "kind", "attempt", "lease_expires_at", "lease_owner", "context", "execution_mode")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_NAME_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_MODE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    instance_id: str
    workflow: str
    version: int
    node_id: str
    step_name: str
    activity: str
    kind: str
    attempt: int
    lease_expires_at: int
    lease_owner: str
    context: _struct_pb2.Value
    execution_mode: str
    def __init__(self, task_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., workflow: _Optional[str] = ..., version: _Optional[int] = ..., node_id: _Optional[str] = ..., step_name: _Optional[str] = ..., activity: _Optional[str] = ..., kind: _Optional[str] = ..., attempt: _Optional[int] = ..., lease_expires_at: _Optional[int] = ..., lease_owner: _Optional[str] = ..., context: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., execution_mode: _Optional[str] = ...) -> None: ...

class TaskList(_message.Message):
    __slots__ = ("tasks", "retry_after_millis")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MILLIS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskActivation]
    retry_after_millis: int
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskActivation, _Mapping]]] = ..., retry_after_millis: _Optional[int] = ...) -> None: ...

class StepResult(_message.Message):
    __slots__ = ("node_id", "merge", "predicate_value")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    MERGE_FIELD_NUMBER: _ClassVar[int]
    PREDICATE_VALUE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    merge: _struct_pb2.Value
    predicate_value: bool
    def __init__(self, node_id: _Optional[str] = ..., merge: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., predicate_value: _Optional[bool] = ...) -> None: ...

class AdvanceRunRequest(_message.Message):
    __slots__ = ("task_id", "lease_owner", "steps", "final")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lease_owner: str
    steps: _containers.RepeatedCompositeFieldContainer[StepResult]
    final: bool
    def __init__(self, task_id: _Optional[str] = ..., lease_owner: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[StepResult, _Mapping]]] = ..., final: _Optional[bool] = ...) -> None: ...

class AdvanceRunResult(_message.Message):
    __slots__ = ("instance_status", "lease_expires_at", "next_task_id")
    INSTANCE_STATUS_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    NEXT_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    instance_status: str
    lease_expires_at: int
    next_task_id: str
    def __init__(self, instance_status: _Optional[str] = ..., lease_expires_at: _Optional[int] = ..., next_task_id: _Optional[str] = ...) -> None: ...

class TaskResultRequest(_message.Message):
    __slots__ = ("task_id", "lease_owner", "result")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lease_owner: str
    result: _struct_pb2.Value
    def __init__(self, task_id: _Optional[str] = ..., lease_owner: _Optional[str] = ..., result: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class TaskFailureRequest(_message.Message):
    __slots__ = ("task_id", "lease_owner", "message", "retryable")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lease_owner: str
    message: str
    retryable: bool
    def __init__(self, task_id: _Optional[str] = ..., lease_owner: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("task_id", "lease_owner", "extend_millis")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    EXTEND_MILLIS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    lease_owner: str
    extend_millis: int
    def __init__(self, task_id: _Optional[str] = ..., lease_owner: _Optional[str] = ..., extend_millis: _Optional[int] = ...) -> None: ...

class HeartbeatResult(_message.Message):
    __slots__ = ("lease_expires_at",)
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    lease_expires_at: int
    def __init__(self, lease_expires_at: _Optional[int] = ...) -> None: ...
