# Palyra mesh. `make run` starts a local node; `make test` runs every test.
SHELL := /bin/bash
GO ?= go
BIN := bin/palyra
PKGS := ./...

.PHONY: all build run test test-short deps proto bench vet fmt examples clean

all: build

build:
	$(GO) build -o $(BIN) .

# deps installs what the tests need on a fresh Debian machine (as root).
deps:
	@bash scripts/deps.sh

examples: build
	@mkdir -p bin/examples
	@for d in examples/*/; do n=$$(basename $$d); \
	  GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -o bin/examples/$$n.wasm ./examples/$$n || exit 1; done

run: build examples
	@echo "Starting a local node (data dir ./palyra-data, QUIC on 127.0.0.1:7444)."
	@echo "In another terminal:  ./bin/palyra job submit --wasm bin/examples/reverse.wasm --input hello --wait"
	./$(BIN) node start

vet:
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)

test: deps vet
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

test-short: vet
	$(GO) test -count=1 -short $(PKGS)

bench: build examples
	$(GO) run ./internal/bench

proto:
	protoc -I proto \
	  --go_out=proto --go_opt=module=github.com/palyra-mesh/palyra/proto \
	  --connect-go_out=proto --connect-go_opt=module=github.com/palyra-mesh/palyra/proto \
	  proto/palyra/v1/api.proto proto/palyra/raft/v1/log.proto

clean:
	rm -rf bin
