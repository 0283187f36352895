# The two commands of the README: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check probe lint bench env messages system-deps wheelhouse clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

env: $(STAMP)

## Build a simulated 32-host lab fleet, enroll, collect and validate it, print the summary.
demo: env
	rm -rf .gpufleet-demo
	$(BIN)/gpufleet --home .gpufleet-demo lab demo --hosts 32

## Everything CI runs: system packages for the SSH lab, lint, types, the whole test suite.
test: env system-deps
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -n 3 --dist loadgroup

## The edit-test loop (under 3 minutes on 2 cores): lint, types, import contracts and the
## unit tests that need no service (domain, parsers, vendor plugins, settings, errors).
## `make test` stays the whole suite and what CI runs.
CHECK_TESTS := tests/domain tests/collect tests/vendors tests/test_errors.py tests/test_config.py \
	tests/store/test_migrations_frozen.py
check: env
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q -n 2 -p no:cacheprovider $(CHECK_TESTS)

## Issue 6 acceptance probe: the bad-input catalogue through the real CLI (also part of `test`).
probe: env system-deps
	$(BIN)/pytest -q tests/probe

## Issue 29 item 8: extract the marked messages (_, N_, ngettext, table headers) and every
## command's help paragraphs (gpufleet.cli.help_i18n) into the
## template and merge them into the zh_CN catalog (then translate the new empty entries;
## tests/test_i18n.py fails while one is empty).
LOCALE := src/gpufleet/locale
messages: env
	$(BIN)/pybabel extract --no-default-keywords -k _ -k N_ -k ngettext:1,2 -k Col:1 \
		-k num:1 --no-location --sort-output --project gpufleet \
		-o $(LOCALE)/gpufleet.pot src/gpufleet
	$(BIN)/python -m gpufleet.cli.help_i18n $(LOCALE)/gpufleet.pot
	$(BIN)/pybabel -q update -i $(LOCALE)/gpufleet.pot -d $(LOCALE) -D gpufleet -l zh_CN \
		--no-fuzzy-matching --ignore-obsolete

system-deps:
	@command -v /usr/sbin/sshd >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; }
	@mkdir -p /run/sshd
	@command -v /usr/sbin/visudo >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sudo >/dev/null; }
	@{ command -v slurmctld && command -v munged; } >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; }
	@command -v promtool >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@command -v slurmdbd >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmdbd >/dev/null; }
	@command -v /usr/bin/chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@test -f /usr/share/fonts/truetype/wqy/wqy-microhei.ttc || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-wqy-microhei >/dev/null; }
	@pg_isready -h 127.0.0.1 -p 5432 -q || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start || true

## Benchmark: gpufleet vs ansible over N real sshd lab hosts (default 100).
bench: env system-deps
	$(BIN)/python bench/collect_vs_ansible.py --hosts $${N:-100}

lint: env
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

## Every wheel an air-gapped install needs (gpufleet, its dependencies and those of every
## optional extra: k8s, dev) in ./wheelhouse; on the offline machine:
##   pip install --no-index --find-links wheelhouse 'gpufleet[k8s]'
WHEELHOUSE ?= wheelhouse
EXTRAS = $(shell $(PY) -c 'import tomllib; print(",".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]))')
wheelhouse: env
	rm -rf build
	$(BIN)/pip wheel -q -w $(WHEELHOUSE) '.[$(EXTRAS)]'
	rm -rf build
	@ls $(WHEELHOUSE)
