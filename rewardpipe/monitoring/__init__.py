"""Is every reward component still teaching? Per-component within-group variance, verdicts and alarms.

Where each part lives (one module per concern):

============================  =====================================================================
``thresholds``                :class:`Thresholds` (when dead, when recovered), known value ranges
``statistics``                the streaming pass: six numbers per (step, group, component)
``verdicts``                  ``ok`` / ``dead`` / ``insufficient_data`` and the cause, per step
``messages``                  the sentences of verdicts and alarms
``state``                     :class:`MonitorState`, what is remembered between steps (the set of
                              checked steps, streaks, trend), :func:`load_state` (corrupt-tolerant)
``hysteresis``                raise once per onset, clear on recovery
``trend``                     the ``dying`` early warning: a steady rise of the zero-variance share
``alarms``                    :class:`Alarm`, where alarms are stored, :func:`dispatch`
``sinks``                     console, store and SNS delivery
``sources``                   reading records from a JSONL file
``batch``                     records as columns (``RecordBatch``) and the per-step numbers built from them
``pooling``                   steps with too few groups for a verdict judged together (small batches)
``fastread``                  JSONL, Parquet and local stores read straight into columns, vouched for
``monitor``                   the entry points :func:`monitor_records` and :func:`monitor_step`
``pending``                   :func:`check_pending`: every unchecked step of every run, isolated
``plots``                     a one-page chart of a run
============================  =====================================================================
"""

from rewardpipe.monitoring.alarms import (
    AGGREGATE_TARGET,
    ERRORS_TARGET,
    Alarm,
    AlarmSink,
    Delivery,
    DeliveryFailure,
    alarm_key,
    deliver,
    dispatch,
)
from rewardpipe.monitoring.monitor import (
    MonitorResult,
    StepPublisher,
    commit_state,
    flush_pending,
    monitor_records,
    monitor_step,
)
from rewardpipe.monitoring.pending import RunCheck, check_pending
from rewardpipe.monitoring.sinks import ConsoleAlarmSink, SnsAlarmSink, StoreAlarmSink
from rewardpipe.monitoring.sources import iter_jsonl_records
from rewardpipe.monitoring.state import MonitorState, PendingDelivery, TargetState, load_state, state_key
from rewardpipe.monitoring.thresholds import DEFAULT_RANGES, AlarmPolicy, MonitorInputError, Thresholds
from rewardpipe.monitoring.verdicts import ComponentStats, StepReport

__all__ = [
    "AGGREGATE_TARGET",
    "DEFAULT_RANGES",
    "ERRORS_TARGET",
    "Alarm",
    "AlarmPolicy",
    "AlarmSink",
    "ComponentStats",
    "ConsoleAlarmSink",
    "Delivery",
    "DeliveryFailure",
    "MonitorInputError",
    "MonitorResult",
    "MonitorState",
    "PendingDelivery",
    "RunCheck",
    "SnsAlarmSink",
    "StepPublisher",
    "StepReport",
    "StoreAlarmSink",
    "TargetState",
    "Thresholds",
    "alarm_key",
    "check_pending",
    "commit_state",
    "deliver",
    "dispatch",
    "flush_pending",
    "iter_jsonl_records",
    "load_state",
    "monitor_records",
    "monitor_step",
    "state_key",
]
