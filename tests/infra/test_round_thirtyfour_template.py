"""Round thirty-four, the deploy's settings and template against the real services' rules.

* The settings reference (docs/reference/settings.md) listed only the top-level model's checks across settings: the
  Fargate cpu/memory pair rule the settings enforce (round thirty-three) was on no page, and ``fargate.cpu`` was
  described by a note to developers. Every nested settings model's checks are listed now, under their keys, and the
  Fargate rule names each CPU size's memory sizes as the check does.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.xdist_group("cdk")


def test_the_settings_reference_states_the_fargate_size_rule_for_every_cpu():
    from scripts import gen_docs
    from stacks.config import FARGATE_MEMORY_MIB

    page = gen_docs.render_settings()
    (rule,) = [line for line in page.splitlines() if "`fargate.memory_mib`" in line and "`fargate.cpu`" in line]
    for cpu, sizes in FARGATE_MEMORY_MIB.items():
        step = sizes[1] - sizes[0]
        named = ", ".join(map(str, sizes)) if len(sizes) <= 4 else f"{sizes[0]} to {sizes[-1]} in steps of {step}"
        assert f"{cpu}: {named}" in rule, (cpu, rule)


def test_every_nested_settings_model_check_is_on_the_settings_page():
    import inspect

    from pydantic import BaseModel

    from scripts import gen_docs

    page = gen_docs.render_settings()

    def models(model):
        yield model
        for field in model.model_fields.values():
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                yield from models(field.annotation)

    checked = 0
    for context_key, reference, _ in gen_docs.SETTINGS_MODELS:
        if context_key != "rewardpipe":
            continue  # the Nova bridge's settings have owners of their own
        for model in models(gen_docs.load_model(reference)):
            for decorator in model.__pydantic_decorators__.model_validators.values():
                doc = inspect.getdoc(decorator.func)
                assert doc, f"{model.__name__}.{decorator.func.__name__} checks settings and says nothing"
                assert " ".join(doc.split()) in page, (model.__name__, doc)
                checked += 1
    assert checked >= 6


def test_fargate_cpu_is_described_for_users():
    from scripts import gen_docs

    (row,) = [line for line in gen_docs.render_settings().splitlines() if line.startswith("| `fargate.cpu`")]
    assert "Literal" not in row and "16384" in row
