# guitrainer: `make run` installs and opens the app; `make test` installs and runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch from pip's configured index (the CI machines': the CPU build on disk; PyPI on Linux: CUDA).
# To choose the build, pass its index, e.g.
#   make run TORCH_SPEC="torch==2.13.0" TORCH_INDEX="--index-url https://download.pytorch.org/whl/cu128"
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

test: install
	QT_QPA_PLATFORM=offscreen OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q

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
