# Two targets for readers: `make book` (install + build the book), `make test` (all tests).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# CPU build of torch, pinned: an unpinned torch pulls a multi-GB CUDA build.
TORCH  ?= torch==2.13.0

.PHONY: install book test notebooks clean

$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install "$(TORCH)"
	$(PY) -m pip install -r requirements.txt
	# a local MathJax lets the browser check run offline (optional: needs npm)
	if command -v npm >/dev/null; then npm install --no-save --no-audit --no-fund --prefix _build/mathjax mathjax@3.2.2; fi
	touch $@

install: $(VENV)/.installed

book: install
	$(VENV)/bin/jupyter-book build . -n -W --keep-going

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

clean:  # the built book; keeps _build/mathjax, which make install put there
	[ ! -d _build ] || find _build -mindepth 1 -maxdepth 1 ! -name mathjax -exec rm -rf {} +

notebooks: install  # re-execute chapters in place after editing them (NB=chapters/02_attention_table.ipynb for one)
	$(PY) .ci/execute_notebooks.py $(NB)
