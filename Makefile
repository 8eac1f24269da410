# The commands of the README:
#   make book   build the book (executes every notebook on whatever device is present)
#   make test   run every test: unit tests, notebooks (nbval), book build, browser tests
#   make lab    JupyterLab on chapters/ with live widgets (adds requirements-lab.txt to .venv)
VENV ?= .venv
PY := $(VENV)/bin/python
JOBS ?= 2

.PHONY: book test install install-lab clean lab

install:
	@bash code/scripts/bootstrap.sh

book: install
	@bash code/scripts/build_book.sh

install-lab:  # the book's environment plus JupyterLab, all or nothing
	@bash code/scripts/bootstrap_lab.sh

test: install-lab  # the live-notebook test drives a real JupyterLab
	@bash code/scripts/run_tests.sh

lab: install-lab  # extra arguments for jupyter lab: make lab LAB_ARGS="--port 9000"
	@bash code/scripts/lab.sh $(LAB_ARGS)

clean:
	rm -rf _build .pytest_cache
