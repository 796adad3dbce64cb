# guitrainer: `make run` installs and opens the app; `make test` installs and runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch from pip's configured index (the CI machines': the CPU build on disk; PyPI on Linux: CUDA).
# To choose the build, pin it with its label and pass its index, e.g.
#   make run TORCH_SPEC="torch==2.13.0+cu130" TORCH_INDEX="--index-url https://download.pytorch.org/whl/cu130"
# cu130: Turing (GTX 16, RTX 20) and newer, NVIDIA driver 580+; cu126: GTX 10-series and older too, driver 525+.
# torch 2.13 has no cu128 build (PyTorch RELEASE.md, "PyTorch CUDA Support Matrix"). The "+cu130" pin makes pip
# replace another build of 2.13.0 (without it pip keeps the one installed); rm .venv/.installed to reinstall.
TORCH_SPEC  ?= torch==2.13.0
TORCH_INDEX ?=

.PHONY: install run test lint bench bundle clean
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH_INDEX) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $@

run: install
	$(BIN)/python -m guitrainer

# Two pytest processes (a Qt process has one platform): the offscreen suite, then the real-window suite
# (tests/realwindow: its own Xvfb + openbox, real input through xdotool, screenshots in artifacts/).
# Logs in artifacts/; the last line sums up both runs; make fails if either failed.
test: SHELL := /bin/bash
test: install
	@mkdir -p artifacts; set -o pipefail; offscreen=0; realwindow=0; \
	QT_QPA_PLATFORM=offscreen OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q --ignore=tests/realwindow \
	  | tee artifacts/test-offscreen.log || offscreen=$$?; \
	echo "---- real-window suite (Xvfb + openbox, real mouse and keyboard): tests/realwindow"; \
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q tests/realwindow | tee artifacts/test-realwindow.log || realwindow=$$?; \
	echo "make test: offscreen suite: $$(tail -n1 artifacts/test-offscreen.log | tr -d '=' | sed 's/^ *//; s/ *$$//')" \
	  "| real-window suite: $$(tail -n1 artifacts/test-realwindow.log | tr -d '=' | sed 's/^ *//; s/ *$$//')"; \
	test $$offscreen -eq 0 -a $$realwindow -eq 0

lint: install
	$(BIN)/ruff check .

bench: install
	QT_QPA_PLATFORM=offscreen $(BIN)/python bench/startup.py

# The double-click app: dist/guitrainer/ (one folder) + the Linux .tar.gz, then the bundle's --self-test.
bundle: install
	$(BIN)/python -m pip install -q -e ".[build]"
	$(BIN)/python build_installer.py --self-test

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
