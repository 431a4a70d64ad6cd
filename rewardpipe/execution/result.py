"""Typed job and result of one code execution."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import ConfigDict, Field, ModelWrapValidatorHandler, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails

from rewardpipe.deferred import DeferredModel
from rewardpipe.models import MAX_ID_LENGTH, require_function_name, require_printable_id


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so it can always be encoded as UTF-8.

    Model-controlled text (exception messages, output, ids echoed from a job file) reaches every
    writer through an ExecutionResult; one unencodable character must not lose a record or a batch.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


class ExecutionStatus(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    ERROR = "error"


class ExecutionJob(DeferredModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(default="", max_length=MAX_ID_LENGTH)  # optional; when given, an id like any other
    code: str
    tests: str
    # The function under test: required for "unittest" and "check", unused (left empty) for "stdio".
    entry_point: str = ""
    # "unittest", "check" (HumanEval) or "stdio": ``tests`` is a JSON list of {"input": str, "output": str} and
    # the code is a whole program, run once per case with the input as stdin (see docs/sandbox.md).
    tests_format: Literal["unittest", "check", "stdio"] = "unittest"
    timeout_s: float = Field(default=10.0, gt=0, le=3600, allow_inf_nan=False)
    # "split" (default): the tests run in a trusted process and reach the model's code only through
    # plain-data calls. "inprocess": the documented fallback for tests that need the model's objects in
    # their own process; the code is statically screened first and the verdict is weaker (see
    # docs/sandbox.md). Chosen by whoever owns the tests, never by the model.
    trust_mode: Literal["split", "inprocess"] = "split"

    @field_validator("entry_point")
    @classmethod
    def _entry_point_is_a_name(cls, value: str) -> str:
        return require_function_name(value) if value else value

    @model_validator(mode="wrap")
    @classmethod
    def _entry_point_required_unless_stdio(cls, data: Any, handler: ModelWrapValidatorHandler[ExecutionJob]) -> Any:
        """A job without ``entry_point`` (or with an empty one) is refused as before ("entry_point: Field
        required", with any other problem of the job) unless its tests are ``stdio``, which need none."""
        if not (isinstance(data, dict) and data.get("entry_point", "") == "" and data.get("tests_format") != "stdio"):
            return handler(data)
        problems = [
            InitErrorDetails(type="missing", loc=("entry_point",), input=data)
            if "entry_point" not in data
            else InitErrorDetails(type="string_too_short", loc=("entry_point",), input="", ctx={"min_length": 1})
        ]
        try:
            handler({**data, "entry_point": "_"})  # whatever else is wrong with it, said too
        except ValidationError as exc:
            problems += [
                InitErrorDetails(type=e["type"], loc=e["loc"], input=e["input"], ctx=e.get("ctx", {}))
                for e in exc.errors()
            ]
        order = list(cls.model_fields)
        problems.sort(key=lambda e: order.index(e["loc"][0]) if e["loc"] and e["loc"][0] in order else len(order))
        raise ValidationError.from_exception_data(cls.__name__, problems)

    @model_validator(mode="after")
    def _entry_point_unless_stdio(self) -> ExecutionJob:
        if self.tests_format == "stdio":
            if self.entry_point:
                raise ValueError("entry_point is not used by stdio tests (the code is a whole program): leave it empty")
            if self.trust_mode != "split":
                raise ValueError("trust_mode 'inprocess' does not apply to stdio tests (no test code runs)")
        elif not self.entry_point:
            raise ValueError("entry_point is required unless tests_format is 'stdio'")
        return self

    @field_validator("id")
    @classmethod
    def _printable_id(cls, value: str) -> str:
        return require_printable_id(value)  # "" (no id given) passes: it has no character to refuse


class ExecutionResult(DeferredModel):
    id: str = ""
    status: ExecutionStatus
    passed: int = 0
    total: int = 0
    reason: str = ""
    # Which trust mode ran: "split" (model code in its own process, tests in a trusted one) or
    # "inprocess" (documented fallback for tests that need non-plain objects).
    mode: str = ""
    # Isolation layers detected and applied for this run, e.g. {"uid": "65534", "netns": "on"}.
    isolation: dict[str, str] = Field(default_factory=dict)
    # An ``error`` caused by the model's code itself (it does not define the entry point): the tests
    # could not run, yet the rollout is the model's failure and scores 0, never an excluded error.
    model_fault: bool = False
    duration_ms: float = 0.0
    stdout: str = ""
    stderr: str = ""

    @field_validator("id", "reason", "stdout", "stderr", "mode")
    @classmethod
    def _encodable(cls, value: str) -> str:
        return clean_text(value)

    @property
    def is_infrastructure_error(self) -> bool:
        return self.status is ExecutionStatus.ERROR and not self.model_fault

    @property
    def fraction_passed(self) -> float:
        """Correctness in [0, 1]: model failures (timeout, crash, no entry point) are 0.0; callers
        handle infrastructure errors."""
        if self.model_fault:
            return 0.0
        if self.status is ExecutionStatus.ERROR:
            raise ValueError("an infrastructure error has no correctness value")
        if self.total <= 0:
            return 0.0
        return max(0.0, min(1.0, self.passed / self.total))
