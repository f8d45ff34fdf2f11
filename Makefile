# Switchyard: `make demo` runs the embedded demo, `make test` runs every test.
GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

# Core packages: deterministic, and always tested under the race detector.
CORE := ./router/clock/... ./router/events/... ./router/core/... ./router/coreconfig/... ./router/discovery/... ./router/discoverysource/... \
        ./router/config/... ./router/picker/... ./router/envelope/... ./router/eventplane/... ./router/load/... \
        ./router/kv/... ./router/kvsource/... ./router/tokenizer/... ./router/prompt/... ./router/admin/... ./router/metrics/... ./router/h1/... ./router/httpd/... ./router/sockio/... ./sim/... ./recorder/... ./scenario/expect/...

.PHONY: build test scenarios test-deps envtest-assets grpcurl inference-sim vet fmt-check race demo bench fuzz clean

# The Kubernetes discovery tests run a real kube-apiserver and etcd
# (envtest), built from the Go module proxy by hack/envtest/build.sh into a
# cache folder outside the clone. The first build takes about 10 minutes;
# later runs find the binaries and skip it.
export KUBEBUILDER_ASSETS ?= $(shell bash hack/envtest/build.sh --dir)
export KUBEBUILDER_CONTROLPLANE_START_TIMEOUT ?= 120s

# The endpoint picker's tests drive it with grpcurl, an independent gRPC
# client built from the Go module proxy by hack/grpcurl/build.sh into a
# cache folder outside the clone when missing (about a minute).
export SWITCHYARD_GRPCURL ?= $(shell bash hack/grpcurl/build.sh --path)

# llm-d-inference-sim, an independent vLLM emulator that serves the OpenAI
# API and publishes vLLM KV events, plays the worker Pods of the endpoint
# picker's standalone mode; hack/inference-sim/build.sh builds it from the
# Go module proxy into a cache folder outside the clone when missing
# (about 9 minutes the first time). CI builds it before `make test`.
export SWITCHYARD_INFERENCE_SIM ?= $(shell bash hack/inference-sim/build.sh --path)

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/switchyard ./cmd/switchyard

vet:
	$(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Tests that measure the live stack against the wall clock run alone, after
# the other packages, so that those do not compete with them for the cores.
WALLCLOCK      := ./sim/fidelity/
WALLCLOCK_PKGS := switchyard/sim/fidelity
not_wallclock   = $(filter-out $(WALLCLOCK_PKGS),$(shell $(GO) list $(1)))

# The race detector slows the simulator's packages several times over, so
# they get more than the default 10 minutes on a shared 2-core machine.
race: envtest-assets
	$(GO) test -race -count=1 -timeout 30m $(call not_wallclock,$(CORE))
	$(GO) test -race -count=1 $(WALLCLOCK)

# Independent peers some tests talk to (libzmq via python3-zmq, python3-msgpack).
test-deps:
	@bash hack/install-test-deps.sh

envtest-assets:
	@bash hack/envtest/build.sh >/dev/null

grpcurl:
	@bash hack/grpcurl/build.sh >/dev/null

inference-sim:
	@bash hack/inference-sim/build.sh >/dev/null

test: test-deps envtest-assets grpcurl fmt-check vet race
	$(GO) test -count=1 $(call not_wallclock,./...)
	$(GO) test -count=1 $(WALLCLOCK)
	$(MAKE) scenarios

# The scenario suite (docs/scenarios.md): every scenario simulated, then the
# live subset against embedded etcd, the fake fleet and the router on
# loopback. JUnit XML and the HTML reports land in out/scenarios/.
LIVE_SCENARIOS ?= $(shell cat scenarios/suite/LIVE 2>/dev/null)
scenarios:
	$(GO) run ./cmd/switchyard scenario run scenarios/suite --junit out/scenarios/sim.xml --report out/scenarios/sim
	$(if $(strip $(LIVE_SCENARIOS)),$(GO) run ./cmd/switchyard scenario run $(LIVE_SCENARIOS) --mode live --junit out/scenarios/live.xml --report out/scenarios/live)

demo: build
	./bin/switchyard demo

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./router/discovery/ ./router/load/ ./router/eventplane/... \
		./router/picker/ ./router/kv/ ./router/tokenizer/ ./router/prompt/template/ ./recorder/
	$(GO) test -run '^$$' -bench MooncakeTrace -benchtime 1x ./sim/
	$(GO) test -run '^$$' -bench . -benchmem ./router/epp/

# Short fuzzing pass over every decoder; FUZZTIME=5m for a longer one. FUZZMINTIME caps the time a
# target spends minimising a new input, so every target spends its run fuzzing.
FUZZTIME    ?= 20s
FUZZMINTIME ?= 5s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzReducer -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/discovery/
	$(GO) test -run '^$$' -fuzz FuzzTrimCard -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/discovery/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/config/
	$(GO) test -run '^$$' -fuzz FuzzFleetFile -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./cmd/switchyard/
	$(GO) test -run '^$$' -fuzz FuzzSkip -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/envelope/msgpack/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/envelope/
	$(GO) test -run '^$$' -fuzz FuzzDecodeActiveLoad -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/load/
	$(GO) test -run '^$$' -fuzz FuzzStoreApply -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/load/
	$(GO) test -run '^$$' -fuzz '^FuzzReadMessage$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/eventplane/zmtp/
	$(GO) test -run '^$$' -fuzz FuzzReadMessageOrIdle -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/eventplane/zmtp/
	$(GO) test -run '^$$' -fuzz FuzzHandshake -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/eventplane/zmtp/
	$(GO) test -run '^$$' -fuzz FuzzParseKVTopic -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/eventplane/
	$(GO) test -run '^$$' -fuzz FuzzDecodeRouterEvent -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/kv/
	$(GO) test -run '^$$' -fuzz FuzzDecodeMetadata -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/discoverysource/k8ssource/
	$(GO) test -run '^$$' -fuzz FuzzCounter -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/outputcount/
	$(GO) test -run '^$$' -fuzz FuzzExchange -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/epp/
	$(GO) test -run '^$$' -fuzz FuzzApplyEPPVariables -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/config/
	$(GO) test -run '^$$' -fuzz FuzzDecodeVLLMBatch -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/kv/
	$(GO) test -run '^$$' -fuzz FuzzIndex -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/kv/
	$(GO) test -run '^$$' -fuzz FuzzBlockHashes -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/kv/
	$(GO) test -run '^$$' -fuzz FuzzLoad -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/tokenizer/
	$(GO) test -run '^$$' -fuzz FuzzEncode -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/tokenizer/
	$(GO) test -run '^$$' -fuzz FuzzParseCard -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/prompt/artifacts/
	$(GO) test -run '^$$' -fuzz FuzzRender -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/prompt/template/
	$(GO) test -run '^$$' -fuzz FuzzInputFromChatRequest -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/prompt/template/
	$(GO) test -run '^$$' -fuzz FuzzValid -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/jsonvalid/
	$(GO) test -run '^$$' -fuzz FuzzTokenPrompt -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/prompt/
	$(GO) test -run '^$$' -fuzz FuzzDecodeFrames -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./recorder/
	$(GO) test -run '^$$' -fuzz FuzzTrace -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./sim/workload/
	$(GO) test -run '^$$' -fuzz FuzzAnthropicToChat -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/gateway/
	$(GO) test -run '^$$' -fuzz FuzzResponsesToChat -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/gateway/
	$(GO) test -run '^$$' -fuzz FuzzResponsesBody -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./fakefleet/frontend/
	$(GO) test -run '^$$' -fuzz FuzzBatchDecode -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/replica/
	$(GO) test -run '^$$' -fuzz FuzzParseProfile -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./fakefleet/engine/perf/
	$(GO) test -run '^$$' -fuzz FuzzFromExperiment -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./fakefleet/engine/perf/
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/bus/wire/
	$(GO) test -run '^$$' -fuzz FuzzParseInbound -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/gateway/
	$(GO) test -run '^$$' -fuzz FuzzWithTokenData -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/gateway/
	$(GO) test -run '^$$' -fuzz FuzzPromptRewrite -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/gateway/
	$(GO) test -run '^$$' -fuzz FuzzAnthropicStream -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/gateway/
	$(GO) test -run '^$$' -fuzz FuzzResponsesStream -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/gateway/
	$(GO) test -run '^$$' -fuzz FuzzResponse -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/gateway/upstream/
	$(GO) test -run '^$$' -fuzz FuzzHead -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/gateway/upstream/
	$(GO) test -run '^$$' -fuzz FuzzChunkSize -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/h1/
	$(GO) test -run '^$$' -fuzz FuzzConnection -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/httpd/
	$(GO) test -run '^$$' -fuzz FuzzParseExperiment -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./internal/groundtruth/
	$(GO) test -run '^$$' -fuzz FuzzParseRequests -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./internal/groundtruth/
	$(GO) test -run '^$$' -fuzz FuzzHashPodName -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/discoverysource/k8ssource/
	$(GO) test -run '^$$' -fuzz FuzzExchange -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/epp/
	$(GO) test -run '^$$' -fuzz FuzzApplyEPPVariables -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./router/config/
	$(GO) test -run '^$$' -fuzz FuzzExpectations -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./scenario/expect/

clean:
	rm -rf bin out
