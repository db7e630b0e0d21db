# Palyra mesh. `make run` starts a local node; `make test` runs every test.
SHELL := /bin/bash
GO ?= go
BIN := bin/palyra
PKGS := ./...

.PHONY: all build install run test test-short deps proto bench vet fmt examples clean

all: build

COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/palyra-mesh/palyra/cli.Commit=$(COMMIT)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) .

# install puts palyra on PATH (PREFIX/bin, default /usr/local/bin).
PREFIX ?= /usr/local
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/palyra

# deps installs what the tests need on a fresh Debian machine (as root).
deps:
	@bash scripts/deps.sh

# console-ui rebuilds the web console (cli/console/ui) with its pinned npm
# toolchain; the build (cli/console/ui/dist) is committed and embedded, so
# building palyra needs no Node.js.
.PHONY: console-ui
console-ui:
	cd cli/console/ui && npm ci && npm run build

examples: build
	@mkdir -p bin/examples
	@for d in examples/*/; do n=$$(basename $$d); [ "$$n" = skills ] && continue; \
	  GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -o bin/examples/$$n.wasm ./examples/$$n || exit 1; done

# skill-example builds the example skill's tools and packs them, signed
# with a publisher key made on first use (bin/skills/example.key).
.PHONY: skill-example
skill-example: examples
	@rm -rf bin/skills/web && mkdir -p bin/skills/web/modules
	@cp examples/skills/web/skill.toml bin/skills/web/
	@cp bin/examples/wordcount.wasm bin/examples/fetchjson.wasm bin/skills/web/modules/
	@[ -f bin/skills/example.key ] || ./bin/palyra skill keygen -o bin/skills/example.key > bin/skills/example.pub
	./bin/palyra skill pack bin/skills/web --key bin/skills/example.key -o bin/skills/example.web-1.0.0.palyra-skill
	./bin/palyra skill inspect bin/skills/example.web-1.0.0.palyra-skill --trust "$$(cat bin/skills/example.pub)"

run: build examples
	@echo "Starting a local node (data dir ./palyra-data, QUIC on 127.0.0.1:7444)."
	@echo "In another terminal:  ./bin/palyra job submit --wasm bin/examples/reverse.wasm --input hello --wait"
	./$(BIN) node start

vet:
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)

test: deps vet
	@GO=$(GO) bash scripts/test.sh $(PKGS)

test-short: vet
	$(GO) test -count=1 -short $(PKGS)

bench: build examples
	@GO=$(GO) bash scripts/bench.sh

# bench-failover runs only the failover figures of 'make bench' (leader
# and worker SIGKILL, failure detection; 3 processes, production timers).
.PHONY: bench-failover
bench-failover: build examples
	$(GO) run ./internal/bench -single=false -scale=false -throughput=false

# demo runs a three-node cluster on loopback, kills its leader mid-job and
# narrates what happens (scripts/demo.sh); it cleans up after itself.
.PHONY: demo
demo: build examples
	@bash scripts/demo.sh

# proto regenerates the checked-in Go code (needs Debian's protobuf-compiler).
PROTOC_GEN_GO := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_CONNECT := connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
proto:
	@command -v protoc >/dev/null || apt-get install -y -qq protobuf-compiler
	GOBIN=$(CURDIR)/bin/tools $(GO) install $(PROTOC_GEN_GO)
	GOBIN=$(CURDIR)/bin/tools $(GO) install $(PROTOC_GEN_CONNECT)
	PATH=$(CURDIR)/bin/tools:$$PATH protoc -I proto \
	  --go_out=proto --go_opt=module=github.com/palyra-mesh/palyra/proto \
	  --connect-go_out=proto --connect-go_opt=module=github.com/palyra-mesh/palyra/proto \
	  $$(cd proto && find palyra -name '*.proto' | sort | sed 's#^#proto/#')

clean:
	rm -rf bin
