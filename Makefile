# Two commands set everything up on a fresh machine:
#   make demo   runs a real sweep on embedded defaults
#   make test   starts RabbitMQ and SecantusDB as needed and runs the tests
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: venv test demo lint bench clean

EXAMPLES := examples/sweepstack_examples

# The example training functions (`trainable: digits_cnn`) install beside the package.
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml $(EXAMPLES)/pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@echo "make: installing the pinned dependencies into $(VENV) (a few minutes the first time; torch is the largest)"
	$(VENV)/bin/pip install --disable-pip-version-check --progress-bar on -r requirements-dev.txt
	$(VENV)/bin/pip install --disable-pip-version-check -q --no-deps -e .
	$(VENV)/bin/pip install --disable-pip-version-check -q --no-deps -e $(EXAMPLES)
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	bash scripts/test.sh $(PYTEST_ARGS)

# The McLeod sweep, trimmed to a few minutes, on an embedded store and broker, with the
# dashboard; on a terminal the dashboard stays up after the sweep until Ctrl-C.
demo: $(STAMP)
	$(VENV)/bin/sweepstack run configs/mcleod-demo.yaml --hold

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(VENV)/bin/python -m bench

clean:
	rm -rf $(VENV) .services .pytest_cache
