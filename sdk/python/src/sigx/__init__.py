"""sigx: virtual actors for Python (asyncio, grpc.aio). See sdk/python/README.md."""

from sigx import errors
from sigx.actors.v1.app_pb2 import (
    DEACTIVATE_REASON_IDLE,
    DEACTIVATE_REASON_SHUTDOWN,
    DEACTIVATE_REASON_SUPERSEDED,
    DEACTIVATE_REASON_UNSPECIFIED,
)
from sigx.app import App, SessionEnd
from sigx.client import (
    ACTIVE,
    ANY,
    LOCALITY_ANY,
    LOCALITY_SAME_NODE,
    LOCALITY_SAME_ZONE,
    Client,
    Members,
)
from sigx.context import ActorContext, TurnInfo, WorkerContext, current_turn
from sigx.registry import actor, method, worker
from sigx.reminders import ActorHandle, Reminder, ReminderInfo
from sigx.state import State
from sigx.timers import TimerTick
from sigx.trace import TraceContext, current_trace, with_trace

__all__ = [
    "ACTIVE",
    "ANY",
    "DEACTIVATE_REASON_IDLE",
    "DEACTIVATE_REASON_SHUTDOWN",
    "DEACTIVATE_REASON_SUPERSEDED",
    "DEACTIVATE_REASON_UNSPECIFIED",
    "LOCALITY_ANY",
    "LOCALITY_SAME_NODE",
    "LOCALITY_SAME_ZONE",
    "ActorContext",
    "ActorHandle",
    "App",
    "Client",
    "Members",
    "Reminder",
    "ReminderInfo",
    "SessionEnd",
    "State",
    "TimerTick",
    "TraceContext",
    "TurnInfo",
    "WorkerContext",
    "actor",
    "current_trace",
    "current_turn",
    "errors",
    "method",
    "with_trace",
    "worker",
]
