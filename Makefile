# gputide: every target bootstraps .venv itself and makes sure a real Prometheus is installed.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test bench lint soak fuzz prometheus-bin clean dashboards readme

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

# Debian's prometheus package brings both the server and promtool.
prometheus-bin:
	@if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then \
	  echo "prometheus/promtool missing: installing Debian's prometheus package"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	fi
	@command -v prometheus >/dev/null && command -v promtool >/dev/null

lint: $(STAMP)
	$(BIN)/ruff check balancer exporters dashboards deploy bench tests
	$(BIN)/lint-imports

test: $(STAMP) prometheus-bin lint
	promtool check rules rules/*.yaml rules/serving/*.yaml
	# `promtool test rules rules/tests/*.yaml` runs once, inside pytest: tests/rules/test_rules_promtool.py (file by file, side by side)
	$(BIN)/python -m pytest -q -p no:cacheprovider

demo: $(STAMP) prometheus-bin
	$(BIN)/gputide demo --out out

bench: $(STAMP) prometheus-bin
	$(BIN)/python -m bench.run_all

# New random examples for the property tests of tests/fuzz, ten times as many as `make test` draws (repeatable).
fuzz: $(STAMP) prometheus-bin
	HYPOTHESIS_PROFILE=explore GPUTIDE_FUZZ_SCALE=10 $(BIN)/python -m pytest -q -p no:cacheprovider tests/fuzz

soak: $(STAMP) prometheus-bin
	$(BIN)/gputide soak --days 7 --gpus 512 --out out/soak

# Regenerate the dashboards' JSON and everything in deploy/ derived from rules/ and dashboards/.
dashboards: $(STAMP)
	$(BIN)/python -m dashboards.build
	$(BIN)/python -m deploy.gen

# README.md is generated from docs/readme/*.md
readme: $(STAMP)
	$(BIN)/python docs/build_readme.py

clean:
	rm -rf $(VENV) out .pytest_cache
