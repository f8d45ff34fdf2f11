# Switchyard: `make demo` runs the embedded demo, `make test` runs every test.
GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

# Core packages: deterministic, and always tested under the race detector.
CORE := ./router/clock/... ./router/events/... ./router/discovery/... ./router/config/... ./router/picker/... \
        ./router/eventplane/... ./router/load/... ./router/kv/... ./router/admin/... ./router/metrics/... \
        ./sim/... ./recorder/...

.PHONY: build test test-deps vet fmt-check race demo bench fuzz clean

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/switchyard ./cmd/switchyard

vet:
	$(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

race:
	$(GO) test -race -count=1 $(CORE)

# Independent peers some tests talk to (libzmq via python3-zmq, python3-msgpack).
test-deps:
	@bash hack/install-test-deps.sh

test: test-deps fmt-check vet race
	$(GO) test -count=1 ./...

demo: build
	./bin/switchyard demo

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./router/discovery/ ./router/load/ ./router/eventplane/... \
		./router/picker/ ./router/kv/ ./recorder/
	$(GO) test -run '^$$' -bench MooncakeTrace -benchtime 1x ./sim/

# Short fuzzing pass over every decoder; FUZZTIME=5m for a longer one.
FUZZTIME ?= 20s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzReducer -fuzztime $(FUZZTIME) ./router/discovery/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) ./router/config/
	$(GO) test -run '^$$' -fuzz FuzzSkip -fuzztime $(FUZZTIME) ./router/eventplane/msgpack/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./router/eventplane/
	$(GO) test -run '^$$' -fuzz FuzzDecodeActiveLoad -fuzztime $(FUZZTIME) ./router/load/
	$(GO) test -run '^$$' -fuzz FuzzStoreApply -fuzztime $(FUZZTIME) ./router/load/
	$(GO) test -run '^$$' -fuzz FuzzReadMessage -fuzztime $(FUZZTIME) ./router/eventplane/zmtp/
	$(GO) test -run '^$$' -fuzz FuzzHandshake -fuzztime $(FUZZTIME) ./router/eventplane/zmtp/
	$(GO) test -run '^$$' -fuzz FuzzDecodeRouterEvent -fuzztime $(FUZZTIME) ./router/kv/
	$(GO) test -run '^$$' -fuzz FuzzDecodeVLLMBatch -fuzztime $(FUZZTIME) ./router/kv/
	$(GO) test -run '^$$' -fuzz FuzzIndex -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./router/kv/
	$(GO) test -run '^$$' -fuzz FuzzBlockHashes -fuzztime $(FUZZTIME) ./router/kv/
	$(GO) test -run '^$$' -fuzz FuzzDecodeFrames -fuzztime $(FUZZTIME) ./recorder/
	$(GO) test -run '^$$' -fuzz FuzzTrace -fuzztime $(FUZZTIME) ./sim/workload/
	$(GO) test -run '^$$' -fuzz FuzzAnthropicToChat -fuzztime $(FUZZTIME) ./router/gateway/
	$(GO) test -run '^$$' -fuzz FuzzResponsesToChat -fuzztime $(FUZZTIME) ./router/gateway/
	$(GO) test -run '^$$' -fuzz FuzzParseInbound -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./router/gateway/

clean:
	rm -rf bin
