# Two targets for readers: `make book` (install + build the book), `make test` (all tests).
# Contributors: `make check` while editing the package (README.md, "Contributing").
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
TORCH_VERSION := 2.13.0

# TORCH_INDEX: the package index pip gets torch from; empty = pip's default index.
# - Empty suits any index that serves a CPU build of torch $(TORCH_VERSION) for this machine
#   (macOS on PyPI; this repository's own CI machine). On Windows use WSL, where what
#   follows for Linux applies (README.md, "Run it").
# - On Linux PyPI serves a multi-GB CUDA build, so the GitHub workflows set PyTorch's CPU index:
#     make install TORCH_INDEX=https://download.pytorch.org/whl/cpu
# - With an NVIDIA GPU, name the CUDA build that suits its driver, for example:
#     make install TORCH_INDEX=https://download.pytorch.org/whl/cu126
# The Colab check (tests/book/test_colab.py) installs torch from the same index.
TORCH_INDEX ?=
export TORCH_INDEX

# The second nbval run of `make test` executes every chapter as another CPU would: ATen's
# kernels without vector instructions, MKL in its reproducible (SSE2) mode and one thread, so
# sums run in other orders and the last float digits move. The stored outputs must survive it.
PERTURBED := ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1

# matplotlib's font cache, one per venv: the cache in the home folder is shared by every venv
# of one matplotlib version, and one rebuilt while another venv is deleted lacks matplotlib's
# own fonts, so figure cells then warn on stderr and nbval fails. Built once by `make install`,
# so that no chapter's first figure prints "building the font cache".
export MPLCONFIGDIR := $(CURDIR)/$(VENV)/mplconfig

.PHONY: same-torch-index install book test check portable notebooks clean

$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install "torch==$(TORCH_VERSION)" $(if $(TORCH_INDEX),--index-url "$(TORCH_INDEX)")
	$(PY) -m pip install -r requirements.txt
	printf '%s\n' "$(TORCH_INDEX)" > $(VENV)/.torch-index
	touch $@

# pip keeps an installed torch 2.13.0 whatever index is named later (2.13.0+cpu satisfies
# torch==2.13.0), so naming another index than .venv's own would silently change nothing.
same-torch-index:
	@if [ -n "$(TORCH_INDEX)" ] && [ -f $(VENV)/.torch-index ] && \
	    [ "$$(cat $(VENV)/.torch-index)" != "$(TORCH_INDEX)" ]; then \
	  echo "TORCH_INDEX=$(TORCH_INDEX), but .venv's torch came from" \
	       "'$$(cat $(VENV)/.torch-index)' (empty: pip's default index)."; \
	  echo "To change it: rm -rf $(VENV), then run make again."; exit 1; fi

$(VENV)/.fonts: $(VENV)/.installed
	$(PY) -c "import matplotlib.font_manager"
	touch $@

install: same-torch-index $(VENV)/.installed $(VENV)/.fonts

book: install
	$(VENV)/bin/jupyter-book build . -n -W --keep-going

test: install  # everything, then nbval once more as another CPU would run it
	$(PY) -m pytest $(PYTEST_ARGS)
	$(MAKE) --no-print-directory portable

check: install  # the package's tests on every core (about 2 min on 2): no book checks, no chapters
	$(PY) -m pytest tests --ignore=tests/book -n auto $(PYTEST_ARGS)

portable: install  # nbval over the chapters with the float paths perturbed (NB=... for some)
	$(PERTURBED) $(PY) -m pytest $(or $(NB),chapters)

clean:  # the built book
	rm -rf _build

notebooks: install  # re-execute chapters in place after editing them (NB=chapters/02_attention_table.ipynb for one)
	$(PY) .ci/execute_notebooks.py $(NB)
