"""Nova Forge delegated-rollout protocol (v0): message shapes and pure mappings.

Shapes (Nova Forge docs and the public sample; see docs/aws.md "Nova Forge multi-turn")::

    rollout request   {"version":"v0","timestamp":...,"sample_id","max_length","rewards":{"range":[lo,hi]},"data":{...}}
    generate request  {"version":"v0","sample_id","step_id":"<sample_id>_<turn>","messages":[...]}
    generate response {"version":"v0","sample_id","step_id",
                       "data":{"choices":[{"message":{"content","tool_calls"?},"finish_reason"}]},...}
    rollout response  {"version":"v0","sample_id","stop_reason","rewards":{"aggregate_score":...}}
    report envelope   {"id","aggregate_reward_score","metrics_list":[{"name","value","type"}]}

Inferred, not documented, hence configurable (:class:`BridgeConfig`): the GRPO group is the ``sample_id``
without its last ``_N``; how a score outside ``rewards.range`` is treated (we map it, see
:func:`map_into_range`).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Collection, Iterable, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from rewardpipe.deferred import DeferredModel
from rewardpipe.models import ErrorInfo, Task, nova_output, require_printable_id
from rewardpipe.rewards import Reward

VERSION = "v0"
ErrorReward = Literal["neutral", "zero", "fail_batch"]


class NovaProtocolError(ValueError):
    """A message does not follow the v0 protocol; the text names the field."""


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors) and exc.errors():  # type: ignore[attr-defined]
        from rewardpipe.models import field_error

        return field_error(exc.errors()[0], "<root>")  # type: ignore[attr-defined]
    return str(exc)


def _without_nulls(body: Any, fields: tuple[str, ...]) -> Any:
    """``body`` without those of ``fields`` that are null: an optional field sent as null is that field absent
    (its default), never a refused message."""
    if isinstance(body, dict) and any(body.get(name, 0) is None for name in fields):
        return {key: value for key, value in body.items() if not (key in fields and value is None)}
    return body


class RewardRange(DeferredModel):
    model_config = ConfigDict(extra="allow")

    range: tuple[float, float] = (0.0, 1.0)

    @model_validator(mode="before")
    @classmethod
    def _nulls_absent(cls, body: Any) -> Any:
        return _without_nulls(body, ("range",))

    @field_validator("range")
    @classmethod
    def _ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        lo, hi = value
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise ValueError(f"rewards.range must be two finite numbers [lo, hi] with lo <= hi, got {list(value)}")
        return value


class RolloutRequest(DeferredModel):
    model_config = ConfigDict(extra="allow")

    version: str = VERSION
    timestamp: Any = None
    # The id rule of every input (rewardpipe.models.InputId); a request that breaks it is answered as a
    # bad request under the id Nova sent, like one whose id is too long.
    sample_id: Annotated[str, Field(min_length=1, max_length=512), AfterValidator(require_printable_id)]
    max_length: int | None = Field(default=None, ge=1)
    rewards: RewardRange = Field(default_factory=RewardRange)
    data: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _nulls_absent(cls, body: Any) -> Any:
        return _without_nulls(body, ("version", "rewards", "data"))


class GenerateRequest(DeferredModel):
    model_config = ConfigDict(extra="allow")

    version: str = VERSION
    sample_id: str
    step_id: str
    messages: list[dict[str, Any]]


class _ChoiceMessage(DeferredModel):
    model_config = ConfigDict(extra="allow")

    content: Any = ""


class _Choice(DeferredModel):
    model_config = ConfigDict(extra="allow")

    # Absent or null: still a response to its step; its turn ends as the local policy ends it (GenerateResponse.reply).
    message: _ChoiceMessage | None = None
    finish_reason: str | None = None


class _GenerateData(DeferredModel):
    model_config = ConfigDict(extra="allow")

    choices: list[_Choice] = Field(min_length=1)


#: How a generate response's ``finish_reason`` (the choice's, or the response's own) decides its turn
#: (docs/guides/nova-forge.md, "How a turn ends"). Compared in lower case; absent, null or empty is no reason.
#: The model ended its turn, or a limit it ran into did (OpenAI's and vLLM's names, and Bedrock's): its text, empty
#: or cut short, is its turn, and is scored.
MODEL_FINISH_REASONS = frozenset(
    {"stop", "length", "tool_calls", "function_call", "content_filter", "eos", "end_turn", "stop_sequence"}
    | {"max_tokens", "tool_use"}
)
#: The serving side failed or gave the generation up (vLLM's ``abort``, an ``error``): whatever text came with it is
#: no turn of the model's, and the rollout ends as a ``policy_error`` (an error answer), never scored.
FAILED_FINISH_REASONS = frozenset({"error", "abort", "aborted", "cancelled", "canceled", "timeout", "internal_error"})


class GenerateResponse(DeferredModel):
    model_config = ConfigDict(extra="allow")

    version: str = VERSION
    sample_id: str
    step_id: str = Field(min_length=1)
    data: _GenerateData
    finish_reason: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _nulls_absent(cls, body: Any) -> Any:
        return _without_nulls(body, ("version",))

    @property
    def text(self) -> str:
        from rewardpipe.models import content_to_text

        message = self.data.choices[0].message
        if message is None:
            raise ValueError("data.choices[0].message is missing")
        return content_to_text(message.content)

    @property
    def stop(self) -> str | None:
        return self.data.choices[0].finish_reason or self.finish_reason

    def finish_problem(self, accepted: Collection[str] = ()) -> str | None:
        """Why this response's ``finish_reason`` says it holds no turn of the model's, or None when it holds one: a
        reason of :data:`FAILED_FINISH_REASONS` (the generation failed), or one neither known
        (:data:`MODEL_FINISH_REASONS`) nor ``accepted`` (the bridge's ``model_finish_reasons``), whose text could be
        a failed generation's and is never scored as the model's."""
        extra = {reason.strip().lower() for reason in accepted}
        for reason in (self.data.choices[0].finish_reason, self.finish_reason):
            key = (reason or "").strip().lower()
            if not key or key in extra or key in MODEL_FINISH_REASONS:
                continue
            shown, where = repr(str(reason)[:80]), f"Nova's generate response for step {self.step_id}"
            if key in FAILED_FINISH_REASONS:
                return f"{where} has finish_reason {shown}: the generation failed"
            return (
                f"{where} has the unknown finish_reason {shown}: not scored "
                f"as the model's turn (known: {', '.join(sorted(MODEL_FINISH_REASONS))}; accept it with the setting "
                "model_finish_reasons)"
            )
        return None

    def reply(self, accepted_finish_reasons: Collection[str] = ()) -> dict[str, Any]:
        """The model's turn as the local OpenAI policy reads the same reply
        (:func:`rewardpipe.openai_client.choice_message`): ``{"text", "tool_calls"}`` (the calls, None when there are
        none); ``{"filtered": True}`` when a content filter or a refusal took the text's place. EndpointError when
        the reply holds no turn (no message, a text that is no text, a ``finish_reason`` saying the generation
        failed or one not known: :meth:`finish_problem`): the rollout's ``policy_error``."""
        import json

        from rewardpipe.openai_client import ContentFiltered, EndpointError, NoTextBeforeLimit, choice_message

        problem = self.finish_problem(accepted_finish_reasons)
        if problem is not None:
            raise EndpointError(problem)
        first = self.data.choices[0]
        choice: dict[str, Any] = {"finish_reason": self.stop}
        if first.message is not None:  # as sent: a content left out stays out (the local reading refuses it)
            choice["message"] = first.message.model_dump(mode="python", exclude_unset=True)
        try:
            message = choice_message(choice, f"Nova's generate response for step {self.step_id}")
        except NoTextBeforeLimit:  # max_tokens ran out before any text: the model's empty turn, scored
            return {"text": "", "tool_calls": None}
        except ContentFiltered:
            return {"filtered": True}
        try:  # what the turn hands Step Functions must be JSON: a NaN or an infinity (Python's json reads them) is not
            json.dumps(message["tool_calls"], allow_nan=False)
        except ValueError:
            raise EndpointError(
                f"Nova's generate response for step {self.step_id}: its tool calls hold a number JSON cannot carry "
                "(NaN or an infinity)"
            ) from None
        return {"text": message["content"], "tool_calls": message["tool_calls"]}


class RolloutResponse(DeferredModel):
    version: str = VERSION
    sample_id: str
    stop_reason: str
    rewards: dict[str, float]


def parse(model: type[BaseModel], body: Any) -> Any:
    """Validate one message body (a JSON string or an object) as ``model``; NovaProtocolError names the field."""
    import json

    try:
        data = json.loads(body) if isinstance(body, (str, bytes)) else body
        return model.model_validate(data)
    except Exception as exc:  # noqa: BLE001 - any malformed body is one protocol error
        raise NovaProtocolError(f"{model.__name__}: {_first_error(exc)}") from None


# --------------------------------------------------------------------------------------------------
# Configuration and mappings


class BridgeConfig(DeferredModel):
    """How rollout requests map onto rewardpipe rollouts and how results map back.

    * ``task_field``: dotted path in ``data`` holding a task id; the task is read from
      ``task_key_template`` in the records bucket (put it there with ``rewardpipe tasks``/S3).
    * ``inline_task_field``: dotted path in ``data`` holding a whole task object (wins over ``task_field``).
    * ``group_pattern``: regex with a named group ``group`` applied to ``sample_id``; the default drops the
      last ``_N`` (inferred from Nova's ids, not documented). An id it does not match is a group of its own.
    * ``range_mapping``: ``linear`` maps the reward's own [min, max] onto ``rewards.range``; ``clip`` keeps
      the raw aggregate and clips it into the range.
    * ``error_reward``: what an unscorable rollout answers: ``neutral`` (the mean of the scores answered for the
      scored rollouts of its group, sent once its running group-mates are answered or at its budget, mid-range when
      none is scored: :func:`error_score`), ``zero`
      (the mapped value of an aggregate of 0, clipped), or ``fail_batch`` (answer nothing: Nova's ``rollout.timeout``
      fails the training job, for users who prefer a failed job to a substituted reward). Every error
      answer carries ``reward_error`` = 1 and ``error_<kind>`` = 1 in its metrics.
    * ``rollout_budget_s``: wall-clock budget of one rollout, kept below Nova's ``rollout.timeout``.
    * ``model_finish_reasons``: ``finish_reason`` values, besides :data:`MODEL_FINISH_REASONS`, that end a turn the
      model wrote (scored); any other unknown one ends the rollout as a ``policy_error``
      (:meth:`GenerateResponse.finish_problem`).
    """

    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(default="nova", min_length=1)
    task_field: str = "task_id"
    inline_task_field: str = "task"
    task_key_template: str = "tasks/nova/{task_id}.json"
    group_pattern: str = r"^(?P<group>.+)_(?P<index>\d+)$"
    range_mapping: Literal["linear", "clip"] = "linear"
    error_reward: ErrorReward = "neutral"
    rollout_budget_s: float = Field(default=480.0, gt=0)
    max_turns: int | None = Field(default=None, ge=1, le=100)
    model_finish_reasons: list[str] = Field(default_factory=list)

    @field_validator("group_pattern")
    @classmethod
    def _has_group(cls, value: str) -> str:
        if "group" not in re.compile(value).groupindex:
            raise ValueError("group_pattern needs a named group (?P<group>...)")
        return value


def group_of(sample_id: str, config: BridgeConfig) -> str:
    match = re.match(config.group_pattern, sample_id)
    return match.group("group") if match and match.group("group") else sample_id


def _dig(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def task_source(
    request: RolloutRequest, config: BridgeConfig, task_model: type[BaseModel] = Task
) -> tuple[BaseModel | None, str | None]:
    """``(inline task, None)`` or ``(None, task key)``; NovaProtocolError naming the field otherwise. An inline
    task is validated with ``task_model``, the deployed environment's own (the built-in coding ``Task`` by
    default); a stored one is validated with it when the rollout starts."""
    from rewardpipe.store import encode_id

    inline = _dig(request.data, config.inline_task_field)
    if inline is not None:
        try:
            return task_model.model_validate(inline), None
        except Exception as exc:  # noqa: BLE001
            raise NovaProtocolError(
                f"data.{config.inline_task_field}: not a task of the deployed environment "
                f"({task_model.__name__}): {_first_error(exc)}"
            ) from None
    task_id = _dig(request.data, config.task_field)
    if not isinstance(task_id, str) or not task_id:
        raise NovaProtocolError(
            f"data.{config.task_field}: missing (the rollout request's data must carry a task id there, "
            f"or a whole task under data.{config.inline_task_field})"
        )
    # The documented place of a task (``tasks/nova/<task_id>.json``, percent-encoded as the user uploaded it):
    # the plain encoding, without the case tail record keys get, so existing uploads stay where they are.
    return None, config.task_key_template.format(task_id=encode_id(task_id, portable=False))


def request_key(request: RolloutRequest) -> str:
    """Identity of one rollout request: a redelivered message has the same key; the same ``sample_id`` sent
    again at a later training step (another ``timestamp``) does not."""
    raw = f"{request.sample_id}\x00{request.timestamp!r}"
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


def step_id(sample_id: str, turn: int) -> str:
    return f"{sample_id}_{turn}"


def generate_request(sample_id: str, messages: list[dict[str, Any]]) -> GenerateRequest:
    """The generate request of the next policy turn; the turn index is the number of assistant turns so far."""
    turn = sum(1 for m in messages if m.get("role") in ("assistant", "nova_assistant"))
    return GenerateRequest(sample_id=sample_id, step_id=step_id(sample_id, turn), messages=[_wire(m) for m in messages])


#: What a message keeps on its way to Nova, past its role and content: an assistant's ``tool_calls``, a tool
#: message's ``tool_call_id`` and ``name`` (rewardpipe.models.Message's optional fields), where they are set.
_TOOL_FIELDS = ("tool_calls", "tool_call_id", "name")


def _wire(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as a generate request carries it: role and content, and those of the tool fields it has (a
    tool-calling turn without its calls, or a tool answer without the call it answers, is a conversation the
    policy cannot follow); anything else (a field of the bookkeeping) stays out."""
    wire = {"role": message.get("role"), "content": message.get("content", "")}
    wire.update({name: message[name] for name in _TOOL_FIELDS if message.get(name) is not None})
    return wire


def reward_bounds(reward: Reward) -> tuple[float, float]:
    """The aggregate's own [min, max]: Σ over components of weight × the component's value range (either end
    infinite when that overflows a float: :func:`check_linear_bounds` refuses it for the ``linear`` mapping)."""
    return weighted_bounds((c.weight, c.value_range[0], c.value_range[1]) for c in reward.components)


def weighted_bounds(terms: Iterable[tuple[float, float, float]]) -> tuple[float, float]:
    """[Σ min(w·lo, w·hi), Σ max(w·lo, w·hi)] over ``(weight, lo, hi)`` terms (a component's weight and range)."""
    products = [(weight * lo, weight * hi) for weight, lo, hi in terms]
    return sum(min(pair) for pair in products), sum(max(pair) for pair in products)


def check_linear_bounds(bounds: tuple[float, float], what: str = "the reward") -> tuple[float, float]:
    """``bounds`` when the ``linear`` mapping can use them; ValueError naming the problem when a weight × range (or
    their sum) overflows a float: every aggregate would map to the bottom of Nova's range."""
    if not all(math.isfinite(end) for end in bounds):
        raise ValueError(
            f"range_mapping 'linear' needs the aggregate's own [min, max], and {what}'s weights × component ranges "
            f"overflow a float ({list(bounds)}): use smaller weights or ranges, or range_mapping 'clip'"
        )
    return bounds


def map_into_range(aggregate: float, bounds: tuple[float, float], target: tuple[float, float], mode: str) -> float:
    """``linear``: the reward's [min, max] onto ``target`` (for the blog's reward, [-0.5, 1.6] → e.g. [0, 1]);
    ``clip``: the raw aggregate clipped into ``target``. Either way the answer lies inside ``target``. The linear
    mapping works on halves, so finite bounds (or a target) whose width overflows a float still map; infinite
    bounds are refused when the bridge is built (:func:`check_linear_bounds`)."""
    lo, hi = target
    if mode == "linear" and bounds[1] > bounds[0]:
        fraction = (aggregate / 2 - bounds[0] / 2) / (bounds[1] / 2 - bounds[0] / 2)
        value = 2 * (lo / 2 + fraction * (hi / 2 - lo / 2))
    else:
        value = aggregate
    return min(hi, max(lo, value))


def error_score(
    config: BridgeConfig,
    target: tuple[float, float],
    bounds: tuple[float, float],
    group_scores: Sequence[float] = (),
) -> float | None:
    """The score an unscorable rollout answers with; ``None`` for ``fail_batch`` (answer nothing).

    ``neutral``: the mean of ``group_scores`` (the answers sent to the scored rollouts of the same GRPO group, in this
    range; the bridge holds the error answer until its running group-mates are answered, up to its budget), so the
    error's advantage is about 0 as in the single-turn path (:func:`rewardpipe.single_turn.apply_error_reward`); the
    middle of ``target`` only when the group has no scored rollout."""
    if config.error_reward == "fail_batch":
        return None
    if config.error_reward == "zero":
        return map_into_range(0.0, bounds, target, config.range_mapping)
    scored = [float(value) for value in group_scores if _finite_number(value)]
    if scored:
        return min(target[1], max(target[0], math.fsum(value / len(scored) for value in scored)))
    return (target[0] + target[1]) / 2.0


def report_envelope(
    sample_id: str, score: float, components: dict[str, float | None], metrics: dict[str, Any], error: ErrorInfo | None
) -> dict[str, Any]:
    """``{id, aggregate_reward_score, metrics_list}`` with components as "Reward" and diagnostics as "Metric";
    an error adds ``reward_error`` = 1 and ``error_<kind>`` = 1."""
    envelope = nova_output(sample_id, score, components, metrics, error)
    if error is not None:
        envelope["metrics_list"].append({"name": f"error_{error.kind}", "value": 1, "type": "Metric"})
    return envelope


def _finite_number(value: Any) -> bool:
    """A real, finite number (a bool, a string or an object is none: the state machine's output is read as
    JSON, where a broken scorer or a hand-written output can put anything, an integer past a float too)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def rollout_result(
    sample_id: str,
    target: tuple[float, float],
    reward: Reward,
    config: BridgeConfig,
    *,
    aggregate: Any,
    components: dict[str, float | None],
    metrics: dict[str, Any] | None = None,
    error: ErrorInfo | None = None,
    stop_reason: str = "end_of_conversation",
    group_scores: Sequence[float] = (),
) -> tuple[RolloutResponse | None, dict[str, Any]]:
    """(rollout response to send, or None under ``fail_batch``; the report envelope). The aggregate, components
    and metrics come from the rollout's output (JSON): any that is no finite number (a string, an integer past a
    float) is an error answer for the aggregate, and left out of the envelope for a component or a metric.
    ``group_scores``: the scores already answered for the group's scored rollouts (:func:`error_score`)."""
    bounds = reward_bounds(reward)
    components = {name: float(value) if _finite_number(value) else None for name, value in components.items()}  # type: ignore[arg-type]
    metrics = {
        name: value for name, value in (metrics or {}).items() if isinstance(value, bool) or _finite_number(value)
    }
    if error is None and not _finite_number(aggregate):
        error = ErrorInfo(
            kind="non_finite_score",
            message=f"the rollout has no finite aggregate (got {type(aggregate).__name__} {str(aggregate)[:40]!r})",
        )
    if error is None:
        score = map_into_range(float(aggregate), bounds, target, config.range_mapping)
    else:
        fallback = error_score(config, target, bounds, group_scores)
        envelope = report_envelope(
            sample_id, fallback if fallback is not None else 0.0, components, dict(metrics or {}), error
        )
        if fallback is None:
            return None, envelope
        return RolloutResponse(
            sample_id=sample_id, stop_reason="error", rewards={"aggregate_score": fallback}
        ), envelope
    envelope = report_envelope(sample_id, score, components, {**(metrics or {}), "raw_aggregate": aggregate}, None)
    return RolloutResponse(sample_id=sample_id, stop_reason=stop_reason, rewards={"aggregate_score": score}), envelope
