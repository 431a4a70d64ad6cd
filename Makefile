# rewardpipe: every target sets itself up, so a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# Silences jsii's end-of-life banner for Node 20 (synth still works; see README "Deploy on AWS").
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION = 20

.PHONY: demo test test-trl test-verifiers test-verifiers-0.3 test-verl test-browser install install-dev install-trl bench synth clean \
	docs docs-gen docs-serve lint

# Byte code for the package, which a regular `pip install` writes at install time and an editable one leaves
# to the first import; where PYTHONDONTWRITEBYTECODE is set (as on the project's VM) that import never writes
# it, and every command would compile rewardpipe from source again (~50 ms of CPU a start; benchmarks.md).
# A source edited later is compiled in memory as usual: a stale file is never used.
COMPILE_PACKAGE = $(BIN)/python -m compileall -q rewardpipe

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The runtime install is small (no CDK); the dev install adds CDK, moto and the test tools.
$(VENV)/.installed-runtime: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	$(COMPILE_PACKAGE)
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(COMPILE_PACKAGE)
	# The Lambda layer's wheels for the architectures this machine cannot copy from .venv (arm64 here),
	# cached under ~/.cache/rewardpipe/layer so every later synth and test runs offline.
	$(BIN)/python -m stacks.packaging
	touch $@ $(VENV)/.installed-runtime

# The [trl] extra (torch CPU wheel, trl, transformers, accelerate, datasets) on top of the dev install.
$(VENV)/.installed-trl: pyproject.toml $(VENV)/.installed-dev
	$(BIN)/python -m pip install -q -e '.[dev,trl]'
	touch $@

install: $(VENV)/.installed-runtime
install-dev: $(VENV)/.installed-dev
install-trl: $(VENV)/.installed-trl

demo: $(VENV)/.installed-runtime
	rm -rf demo-store
	$(BIN)/rewardpipe run --tasks rewardpipe/data/tasks.jsonl --policy scripted \
		--group-size 8 --steps 4 --collapse-from-step 3 --out demo-store --run-id demo --plot demo-store/demo.png
	$(BIN)/rewardpipe report demo-store --run-id demo --out demo-store/report.html

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not trl and not verifiers and not verl and not docs"

# A real trl.GRPOTrainer (tiny random model, character tokenizer, CPU) with rewardpipe's callback.
test-trl: $(VENV)/.installed-trl
	$(BIN)/python -m pytest -q -m trl tests/integrations/test_trl_real.py tests/integrations/test_trl_small_batches.py tests/integrations/test_round_thirtyfour_trainers.py \
		tests/integrations/test_round_thirtyfive_trainers.py tests/integrations/test_round_thirtyseven_trainer_monitoring.py
	# The docs' TRL examples, the GRPOTrainer one included (the default run skips it: no trl there).
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/docs/test_examples.py -k trl

# An extra tested in a venv of its own: the core install, the extra and pytest only. $(1) the venv, $(2) the extra.
define extra_venv
$(1)/.installed: pyproject.toml
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	$(1)/bin/python -m pip install -q -e '.[$(2)]' pytest==9.1.1
	touch $$@
endef

# The verifiers adapter against the real package (verifiers brings ~100 packages, some of which the dev
# and trl pins would fight with).
VF_VENV ?= .venv-verifiers
$(eval $(call extra_venv,$(VF_VENV),verifiers))

test-verifiers: $(VF_VENV)/.installed
	$(VF_VENV)/bin/python -m pytest -q -m verifiers -p no:cacheprovider tests/integrations/test_verifiers_real.py \
		tests/integrations/test_verifiers_env_real.py tests/integrations/test_round_thirtythree_verifiers.py tests/integrations/test_round_thirtyfour_trainers.py \
		tests/integrations/test_round_thirtyfive_b_verifiers.py tests/integrations/test_round_thirtysix_verifiers_watch.py \
		tests/integrations/test_round_thirtyseven_trainer_monitoring.py tests/integrations/test_round_thirtyseven_b_step_marks.py
	# The docs' verifiers examples, with the real package (the default venv skips the one that needs it).
	$(VF_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/docs/test_examples.py -k verifiers

# The same real tests against verifiers 0.3.1 (from_verifiers supports 0.2-0.3.x; on 0.3 it reads the classic
# API, Rubric, MultiTurnEnv and SingleTurnEnv, from verifiers.legacy).
# The [verifiers] extra pins 0.2.1, so this venv takes the core install and the pin below. Not in .ci/run.
VF03_VENV ?= .venv-verifiers-0.3
VF03_PIN = verifiers==0.3.1
$(VF03_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VF03_VENV)
	$(VF03_VENV)/bin/python -m pip install -q --upgrade pip
	$(VF03_VENV)/bin/python -m pip install -q -e . $(VF03_PIN) pytest==9.1.1
	touch $@

test-verifiers-0.3: $(VF03_VENV)/.installed
	$(VF03_VENV)/bin/python -m pytest -q -m verifiers -p no:cacheprovider tests/integrations/test_verifiers_real.py \
		tests/integrations/test_verifiers_env_real.py tests/integrations/test_round_thirtyfive_b_verifiers.py \
		tests/integrations/test_round_thirtysix_verifiers_watch.py tests/integrations/test_round_thirtyseven_trainer_monitoring.py \
		tests/integrations/test_round_thirtyseven_b_step_marks.py

# The verl adapter through verl's NaiveRewardManager (verl pins an older transformers than the trl extra
# and brings ray); the extra includes torch's CPU wheel.
VERL_VENV ?= .venv-verl
$(eval $(call extra_venv,$(VERL_VENV),verl))

test-verl: $(VERL_VENV)/.installed
	$(VERL_VENV)/bin/python -m pytest -q -m verl -p no:cacheprovider tests/integrations/test_verl_real.py tests/integrations/test_round_thirtyfour_trainers.py \
		tests/integrations/test_round_thirtysix_verl_monitor.py

# Debian's chromium for the browser tests, installed when missing (needs root and the network); when it
# cannot be, the browser tests skip and say why instead of failing.
define ensure_chromium
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		(apt-get update && apt-get install -y chromium) || \
		echo "$@: chromium could not be installed; the browser tests will be skipped"
endef

# The report in a real headless browser.
test-browser: $(VENV)/.installed-dev
	$(ensure_chromium)
	$(BIN)/python -m pytest -q -m browser -rs tests/report

# The docs site: mkdocs-material (the [docs] extra) beside the dev install, which the generators import.
$(VENV)/.installed-docs: pyproject.toml $(VENV)/.installed-dev
	$(BIN)/python -m pip install -q -e '.[dev,docs]'
	touch $@

# Regenerate what the docs generate from the code: the CLI, cdk.json settings and schema pages
# (scripts/gen_docs.py) and what each example prints (examples/**/*.out). Run it after changing any of them.
docs-gen: $(VENV)/.installed-dev
	$(BIN)/python scripts/gen_docs.py --examples

# Build the site into site/ with --strict (a broken link or anchor, a missing page or a page left out of the
# nav fails the build) from pages that must be current, then open it in a real headless chromium.
docs: $(VENV)/.installed-docs
	$(BIN)/python scripts/gen_docs.py --check
	rm -rf site
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site
	$(ensure_chromium)
	$(BIN)/python -m pytest -q -m docs -rs -p no:cacheprovider tests/docs/test_site_browser.py

docs-serve: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

# ruff (lint and format check) over the whole tree, mypy over rewardpipe/ and stacks/ (strict on the public API
# modules), as configured in pyproject.toml. Read-only: it fixes nothing.
$(VENV)/.installed-lint: pyproject.toml $(VENV)/.installed-dev
	$(BIN)/python -m pip install -q -e '.[dev,lint]'
	touch $@

lint: $(VENV)/.installed-lint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/monitor.py
	$(BIN)/python benchmarks/execution.py
	$(BIN)/python benchmarks/cold_start.py
	$(BIN)/python benchmarks/layer_bytecode.py
	$(BIN)/python benchmarks/report.py

synth: $(VENV)/.installed-dev
	CDK_OUTDIR=cdk.out $(BIN)/python app.py

clean:
	rm -rf $(VENV) $(VF_VENV) $(VF03_VENV) $(VERL_VENV) cdk.out demo-store .pytest_cache site
