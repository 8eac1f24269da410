# The two commands of the README:
#   make book   build the book (executes every notebook on whatever device is present)
#   make test   run every test: unit tests, notebooks (nbval), book build, browser test
VENV ?= .venv
PY := $(VENV)/bin/python
JOBS ?= 2

.PHONY: book test install clean lab

install:
	@bash code/scripts/bootstrap.sh

book: install
	@bash code/scripts/build_book.sh

test: install
	@bash code/scripts/run_tests.sh

lab: install
	$(VENV)/bin/jupyter lab chapters/

clean:
	rm -rf _build .pytest_cache
