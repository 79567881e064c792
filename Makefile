# Ferrule developer entry points. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
CARGO ?= cargo
APT_PACKAGES := nginx-light libnginx-mod-http-lua lua-resty-core lua-cjson \
	libnginx-mod-http-js libnginx-mod-http-headers-more-filter libnginx-mod-stream libnginx-mod-stream-js openssl curl wrk ca-certificates python3 procps iproute2 \
	nginx-dev gcc make libc6-dev libpcre2-dev libssl-dev zlib1g-dev \
	mmdebstrap umoci containerd runc containernetworking-plugins iptables tar \
	prometheus nghttp2-client

.PHONY: deps build test lint bench bench-scale run fmt image cluster-up cluster-down dashboards

## deps: install everything the build and the tests need (idempotent).
deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@# Debian enables the packaged nginx service on install; Ferrule runs its own.
	@systemctl disable --now nginx >/dev/null 2>&1 || true
	@# Likewise containerd: the e2e node runs its own (test/e2e/cluster.sh).
	@systemctl disable --now containerd >/dev/null 2>&1 || true
	@# And Prometheus: the metrics tests start their own (controller/tests/it/metrics.rs).
	@systemctl disable --now prometheus >/dev/null 2>&1 || true
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust with rustup" >&2; exit 1; }
	@# Ferrule's C fast path, built for the installed NGINX (skipped when up to date).
	@bash nginx-module/build.sh

build:
	$(CARGO) build --release --bin ferrule

## image: the OCI images (ferrule.local/ferrule:dev, .../echo:dev, .../pause:dev) in
## target/image/*.oci.tar, imported into the e2e node's containerd (image/build.sh).
image: deps build
	image/build.sh

test: deps image
	$(CARGO) test --workspace
	@# The integration suite again with the njs balancer (LUA_ONLY tests stay on Lua;
	@# the Kubernetes suites do not depend on the balancer).
	FERRULE_IT_BALANCER=njs $(CARGO) test -p ferrule --test it -- --skip e2e:: --skip install:: --skip chart::
	bash lua/test/run.sh
	FAST=1 bash lua/test/run.sh
	bash njs/test/run.sh
	bash test/chart/run.sh
	test/image/test.sh
	test/e2e/pods.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

bench: deps
	$(CARGO) bench -p ferrule-model
	$(CARGO) bench -p ferrule --bench render
	bash test/bench/run.sh

## bench-scale: 10k Ingresses/Services/EndpointSlices (100k endpoints) in the harness
## apiserver; time to Ready, RSS, EndpointSlice -> traffic latency (test/scale/RESULTS.md).
bench-scale: deps
	test/scale/run.sh

## dashboards: PNG pictures of the Grafana dashboards in docs/dashboards/, drawn
## (test/dashboards/render.py, matplotlib in a venv under target/) from a real
## Prometheus that scraped Ferrule under a minute of test traffic.
dashboards: deps
	@test -x target/dashboards-venv/bin/python || python3 -m venv target/dashboards-venv
	@target/dashboards-venv/bin/python -c 'import matplotlib' 2>/dev/null || \
		target/dashboards-venv/bin/pip install -q matplotlib
	FERRULE_DASHBOARDS_PNG=$(CURDIR)/docs/dashboards \
	FERRULE_DASHBOARDS_PYTHON=$(CURDIR)/target/dashboards-venv/bin/python \
		$(CARGO) test -p ferrule --test it metrics:: -- --nocapture

## run: echo backends + Ferrule serving examples/ on localhost:8080 (standalone mode).
run: deps build
	examples/run.sh

## cluster-up / cluster-down: a real single-node Kubernetes for e2e tests (etcd,
## kube-apiserver, controller-manager, scheduler, containerd, kubelet, kube-proxy).
cluster-up:
	test/e2e/cluster.sh up

cluster-down:
	test/e2e/cluster.sh down
