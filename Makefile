# One entry point for building, generating, testing and demoing both operators.
# Every target works on a fresh machine: `make tools` builds what the others need.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
ROOT := $(CURDIR)
BIN := $(ROOT)/bin
export PATH := $(BIN):$(PATH)
# controller-runtime's envtest and our providers find kube-apiserver, etcd and kubectl here.
export KUBEBUILDER_ASSETS := $(BIN)

GO_MODULES := shared fleet-operator mesh-operator e2e
OPERATORS := fleet-operator mesh-operator
CONTROLLER_GEN := $(BIN)/controller-gen
TESTBED_DIR ?= $(ROOT)/.testbed
# -count=1: some tests read files (charts) that Go's test cache does not track.
GO_TEST_FLAGS ?= -count=1

.PHONY: all tools generate manifests charts verify lint test test-fast test-unit test-integration test-e2e e2e-kind \
        demo demo-down images build fmt help bench bench-smoke explore explore-selftest release-dry-run bundle api-reference \
        tools-realnode test-realnode

all: build

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

tools: ## build etcd, kube-apiserver & co., kwok, controller-gen, helm and staticcheck into bin/ (skips what is current)
	hack/build-tools.sh

# The real-node tier's node (docs/development.md, "The real-node tier"): Debian's iptables, ipset and runc
# (installed with apt-get when missing, as root), then containerd, kubelet, kube-proxy, the CNI plugins,
# kube-router and CoreDNS built into bin/node (stamped like the rest: cold ≈ 15 min on 2 shared cores).
tools-realnode: ## the real-node tier's packages (apt-get) and node binaries (bin/node)
	hack/node-packages.sh
	hack/build-tools.sh --node

generate: ## generate deepcopy code for the API types
	@test -x $(CONTROLLER_GEN) || hack/build-tools.sh controller-gen
	for op in $(OPERATORS); do (cd $$op && $(CONTROLLER_GEN) object paths=./api/...); done

manifests: generate ## generate CRDs and RBAC under <operator>/config, then sync them into the charts
	@# The operators' own rules come from the controllers' markers; the mesh
	@# operator's Sail installer rules (internal/sailinstall) go into a ClusterRole
	@# of their own, which the chart binds only with sail.install=true.
	for op in $(OPERATORS); do \
	  (cd $$op && $(CONTROLLER_GEN) crd:allowDangerousTypes=false paths=./api/... output:crd:artifacts:config=config/crd/bases \
	    && $(CONTROLLER_GEN) rbac:roleName=$$op paths=./internal/controller/... output:rbac:artifacts:config=config/rbac); \
	done
	cd mesh-operator && $(CONTROLLER_GEN) rbac:roleName=mesh-operator-sail-installer paths=./internal/sailinstall/... \
	  output:rbac:artifacts:config=config/rbac/sail-installer
	hack/sync-charts.sh

charts: manifests ## lint and package both charts into bin/charts
	@test -x $(BIN)/helm || hack/build-tools.sh helm
	for op in $(OPERATORS); do helm lint --strict charts/$$op; done
	mkdir -p $(BIN)/charts && for op in $(OPERATORS); do helm package charts/$$op -d $(BIN)/charts >/dev/null; done

verify: manifests api-reference ## fail when generated code, CRDs, chart CRDs or the API reference are stale, or go.mod files are untidy
	for m in $(GO_MODULES) tools/release; do (cd $$m && GOWORK=off go mod tidy); done
	@if [ -n "$$(git status --porcelain -- $(GO_MODULES) tools/release charts docs/api-reference.md)" ]; then \
	  echo "generated files or go.mod are stale; run 'make manifests api-reference' and 'go mod tidy', then commit:"; \
	  git status --porcelain -- $(GO_MODULES) tools/release charts docs/api-reference.md; git --no-pager diff --stat -- $(GO_MODULES) tools/release charts docs/api-reference.md; exit 1; fi

api-reference: ## docs/api-reference.md from the CRDs (the API types' doc comments)
	cd tools/release && GOWORK=off go run ./cmd/apiref -root $(ROOT)

fmt: ## gofmt every module
	gofmt -w $(GO_MODULES)

lint: ## gofmt, go vet and staticcheck on every module
	@test -x $(BIN)/staticcheck || hack/build-tools.sh lint
	@out=$$(gofmt -l $(GO_MODULES) tools/release); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	for m in $(GO_MODULES); do (cd $$m && go vet ./... && go vet -tags integration,e2e,realnode ./... && go vet -tags e2e,kind ./... && go vet -tags licensevendor,licensetestkey ./... && staticcheck -tags integration,e2e,realnode ./...); done
	cd tools/release && GOWORK=off go vet ./... && GOWORK=off staticcheck ./...

# Stamped into the binaries (--version, the start-up log line); release images get the tag's version.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
VERSION_LDFLAGS := -X github.com/ericdev/fleetmesh/shared/version.Version=$(VERSION)

build: ## build both operator binaries and the kubectl-celld plugin into bin/ (version stamped from git describe, or VERSION=...)
	for op in $(OPERATORS); do (cd $$op && go build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/$$op ./cmd/$$op); done
	cd fleet-operator && go build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/kubectl-celld ./cmd/kubectl-celld

# Every unit test runs once: the operators' in their released build (without the workspace, which
# also proves each builds alone), shared's and e2e's in the workspace. The integration and e2e tiers
# run only the packages their build tag adds files to (hack/tagged-packages.sh).
test-unit: ## pure tests: builders, golden files, parsers, decision logic (no API server)
	for m in shared e2e; do (cd $$m && go test $(GO_TEST_FLAGS) ./...); done
	for op in $(OPERATORS); do (cd $$op && GOWORK=off go test $(GO_TEST_FLAGS) ./...); done
	@# mesh-license's vendor build (keygen, sign); the default build above is the customer's.
	cd mesh-operator && go test $(GO_TEST_FLAGS) -tags licensevendor ./cmd/mesh-license/
	@# The test build (licensetestkey), which trusts a key from the environment: only the test bed's
	@# operators are built so; its tests run nowhere else.
	cd mesh-operator && go test $(GO_TEST_FLAGS) -tags licensetestkey ./internal/license/ && go test $(GO_TEST_FLAGS) -tags licensetestkey,licensevendor ./cmd/mesh-license/
	@# The release builder (images, archives, SBOMs, checksums, OLM bundles: docs/release.md).
	cd tools/release && GOWORK=off go test $(GO_TEST_FLAGS) ./...

# One go test for the three modules: their packages run side by side (-p, default one per core);
# each test starts its own API server, so they cannot see each other.
test-integration: tools ## tests against a real kube-apiserver + etcd (CEL, SSA, ownership, RBAC)
	pkgs=$$(hack/tagged-packages.sh integration ./shared/... ./fleet-operator/... ./mesh-operator/...); \
	  go test -tags integration -timeout 30m $(GO_TEST_FLAGS) $$pkgs

# The explorer is listed first: it is the longest package, and the others share the second lane.
test-e2e: tools ## local end-to-end: control plane + kwok nodes + operators as processes under chart RBAC
	cd e2e && pkgs=$$(../hack/tagged-packages.sh e2e ./...) && \
	  go test -tags e2e -timeout 30m $(GO_TEST_FLAGS) $$(grep '/explore$$' <<<"$$pkgs") $$(grep -v '/explore$$' <<<"$$pkgs")

test: tools lint verify test-unit test-integration test-e2e ## everything CI runs

# The contributors' loop: what breaks the build or a pure test, in minutes. Compiling the other tiers
# is part of lint (go vet type-checks every build tag's tests); running them is make test's.
test-fast: lint test-unit ## gofmt, vet (every tier's build tags), staticcheck and the unit tests: the fast loop (docs/development.md)

e2e-kind: ## kind end-to-end: real cluster, images loaded, both charts installed (needs Docker; runs in GitHub Actions)
	@test -x $(BIN)/helm || hack/build-tools.sh helm
	for op in $(OPERATORS); do docker build -f $$op/Dockerfile -t $$op:e2e .; done
	docker build -f e2e/cmd/celld-standin/Dockerfile -t celld-standin:e2e .
	cd e2e && FLEETMESH_E2E_KIND=1 go test -tags e2e,kind -count=1 -timeout 60m ./cluster/kind/ ./kindspec/

# The release, built offline as the release workflow publishes it (docs/release.md): both operator images
# and the celld stand-in as multi-arch OCI layouts, the packaged charts, kubectl-celld and mesh-license
# archives (linux/darwin × amd64/arm64), CycloneDX SBOMs, OLM bundles, SHA256SUMS and the krew manifest
# rendered from it; into bin/release.
# RELEASE_VERSION defaults to the charts' version, which CHANGELOG.md must have cut.
RELEASE_VERSION ?=
RELEASE_OUT ?= $(BIN)/release
release-dry-run: ## build every artifact of a release into bin/release, offline, without Docker (docs/release.md)
	@test -x $(BIN)/helm || hack/build-tools.sh helm
	cd tools/release && GOWORK=off go run . -root $(ROOT) -out $(RELEASE_OUT) $(if $(RELEASE_VERSION),-version $(RELEASE_VERSION))
	mkdir -p $(RELEASE_OUT)/krew
	cd fleet-operator && GOWORK=off go run ./krew/render -version $(or $(RELEASE_VERSION),$(shell awk '/^version:/{print $$2}' charts/fleet-operator/Chart.yaml)) \
		-checksums $(RELEASE_OUT)/SHA256SUMS > $(RELEASE_OUT)/krew/celld.yaml

bundle: ## the OLM bundles (CSV, CRDs, metadata) and bundle images of both operators into bin/release/bundle
	@test -x $(BIN)/helm || hack/build-tools.sh helm
	cd tools/release && GOWORK=off go run . -root $(ROOT) -out $(RELEASE_OUT) -only bundles $(if $(RELEASE_VERSION),-version $(RELEASE_VERSION))

images: build ## build both operator images with docker (not available on the dev sandbox)
	for op in $(OPERATORS); do docker build --build-arg VERSION=$(VERSION) -f $$op/Dockerfile -t $$op:dev .; done

demo: tools ## local control plane, both operators under their charts' RBAC, samples applied: what each operator did (Sail and istio-cni SIMULATED), the access table
	hack/demo.sh up

demo-down: ## stop everything `make demo` started
	hack/demo.sh down

# Not part of `make test`: it takes tens of minutes on 2 cores (docs/benchmark.md). Its smoke version
# (N=10, 10 namespaces, no result files) runs in `make test-e2e`; `make bench-smoke` runs it alone.
BENCH_N ?= 30,300,1000
BENCH_MESH ?= 10,300,1000
# Runs of each count, each in a fresh bed; the timing targets of the largest
# N and M are judged on the median of three or more (docs/benchmark.md).
BENCH_N_REPEAT ?= 1
BENCH_MESH_REPEAT ?= 1
bench: tools ## both operators' benchmark on the local control plane; results in bench/results/<UTC time>.{json,md}, summary in README.md
	cd e2e && BENCH_N=$(BENCH_N) BENCH_MESH=$(BENCH_MESH) BENCH_N_REPEAT=$(BENCH_N_REPEAT) BENCH_MESH_REPEAT=$(BENCH_MESH_REPEAT) go run ./bench -out $(ROOT)/bench/results -readme $(ROOT)/README.md -sizing $(ROOT)/docs/install.md

bench-smoke: tools ## the benchmark's smoke test alone (part of test-e2e): N=10 fleets, 10 mesh namespaces, no result files
	cd e2e && go test -tags e2e -count=1 -run TestBenchSmoke -v ./benchmark/

# Not part of `make test` (yet): a real node on this machine, as root, in its own network and mount
# namespaces; the host is compared before and after (docs/development.md, "The real-node tier").
test-realnode: tools tools-realnode ## the real-node tier: operators' images on a real kubelet, NetworkPolicy judged by packets (root)
	cd e2e && go test -tags realnode -count=1 -timeout 60m -p 1 -v ./cluster/real/ ./realnode/

# Not part of `make test` beyond its smoke seeds and the checked-in regressions
# (TestExplore in test-e2e). EXPLORE_COUNT random sequences of EXPLORE_ACTIONS
# actions from EXPLORE_SEED; failures are shrunk and written to EXPLORE_OUT.
EXPLORE_COUNT ?= 20
EXPLORE_ACTIONS ?= 8
EXPLORE_OUT ?= $(ROOT)/e2e/explore/testdata/found
explore: tools ## random action sequences against both operators, invariants at every observed state (docs/development.md)
	mkdir -p $(EXPLORE_OUT)
	cd e2e && EXPLORE_COUNT=$(EXPLORE_COUNT) EXPLORE_ACTIONS=$(EXPLORE_ACTIONS) EXPLORE_OUT=$(EXPLORE_OUT) $(if $(EXPLORE_SEED),EXPLORE_SEED=$(EXPLORE_SEED)) \
		go test -tags e2e -count=1 -timeout 180m -v -run 'TestExplore$$' ./explore/

explore-selftest: tools ## the explorer's own test: planted defects (fleet operator, mesh operator) must be found, one shrunk (≈ 18 min; its judge row also runs in make test)
	cd e2e && EXPLORE_SELFTEST=1 go test -tags e2e -count=1 -timeout 45m -v -run TestPlantedDefect ./explore/
