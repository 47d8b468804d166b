# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv lint demo test test-slow test-all bench bench-serve bench-search bench-handoff bench-fusion bench-cluster bench-calls bench-stream bench-wal bench-cli-search clean

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -r requirements-dev.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/vifusion demo

lint: $(STAMP)  # the formatter and the linter, over the whole tree (settings in pyproject.toml)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

test: lint
	$(BIN)/pytest -q

test-slow: $(STAMP)  # the end-to-end tests `make test` leaves out: clusters, crashes, full disks
	$(BIN)/pytest -q -m slow

test-all: $(STAMP)
	$(BIN)/pytest -q -m ""

bench: $(STAMP)
	$(BIN)/python benchmarks/extract.py

bench-serve: $(STAMP)
	$(BIN)/python benchmarks/serve_load.py

bench-search: $(STAMP)
	$(BIN)/python benchmarks/search.py

bench-handoff: $(STAMP)
	$(BIN)/python benchmarks/handoff.py

bench-fusion: $(STAMP)  # needs root (network namespaces)
	$(BIN)/python benchmarks/fusion.py

bench-cluster: $(STAMP)  # needs root (network namespaces)
	$(BIN)/python benchmarks/cluster.py

bench-calls: $(STAMP)  # what one Ray actor call costs, inline against the object store
	$(BIN)/python benchmarks/ray_calls.py

bench-stream: $(STAMP)  # the shard's end of the stream: a batch synced beside the next, against in turn
	$(BIN)/python benchmarks/shard_stream.py

bench-wal: $(STAMP)  # the shard's log: synced pages dropped from the page cache, against kept
	$(BIN)/python benchmarks/wal.py

bench-cli-search: $(STAMP)  # `vifusion search` cold: in-process readers and the ONNX query model, against Ray
	$(BIN)/python benchmarks/cli_search.py --service

clean:
	rm -rf $(VENV) vifusion-data
