# dtq: one image for `dtq worker`, `dtq scaler`, `dtq observer` and the CLI.
#
#   docker build -t dtq .
#   docker run --rm -e DTQ_REDIS_URL=redis://redis:6379/0 dtq             # a worker (the default command)
#   docker run --rm -e DTQ_REDIS_URL=redis://redis:6379/0 dtq scaler      # the KEDA external scaler
#   docker run --rm -e DTQ_REDIS_URL=redis://redis:6379/0 dtq observer    # the observer's JSON API
#
# The final image is FROM scratch: the static dtq binary, the scaler's binary dtq-scaler
# (`dtq scaler` execs it: the worker binary, started on every scale-up, stays free of
# gRPC and starts faster), the observer's binary dtq-observer (`dtq observer` execs it),
# the demo's embedded Redis dtq-miniredis (`dtq demo` starts it: the image has no
# redis-server), the CA bundle (for rediss:// and the scaler's TLS) and a
# passwd entry for the non-root user 65532. Nothing else: no shell, no package manager.
# Size and cold-start figures are in deploy/README.md.
#
# It uses no BuildKit-only syntax (no RUN --mount, no syntax line), so the classic
# builder builds it too; deploy/test/run.sh builds it that way.

FROM golang:1.26-bookworm AS build
WORKDIR /src

# Modules come from the module proxy, in a layer of their own that a source change does
# not invalidate. An offline build (deploy/test/run.sh) puts vendor/ in the context and
# passes --build-arg GOFLAGS=-mod=vendor, which skips the download.
ARG GOFLAGS=
ENV CGO_ENABLED=0 GOFLAGS=${GOFLAGS}
COPY go.mod go.sum ./
RUN case " ${GOFLAGS} " in *" -mod=vendor "*) echo "modules: vendored" ;; *) go mod download ;; esac

COPY . .
# Static (CGO_ENABLED=0), reproducible paths (-trimpath), stripped (-s -w).
RUN go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/ ./cmd/dtq ./cmd/dtq-scaler ./cmd/dtq-observer ./cmd/dtq-miniredis \
 && mkdir -p /out/etc \
 && echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' >/out/etc/passwd \
 && echo 'nonroot:x:65532:' >/out/etc/group

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/etc/passwd /out/etc/group /etc/
COPY --from=build /out/dtq /out/dtq-scaler /out/dtq-observer /out/dtq-miniredis /
# Numeric, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
USER 65532:65532
# 8080: /healthz, /readyz, /metrics (PORT), and the observer's API; 6000: the scaler's gRPC (DTQ_SCALER_ADDR).
EXPOSE 8080 6000
# The worker drains on SIGTERM: in-flight tasks get DTQ_DRAIN_TIMEOUT_S to finish, the rest
# are handed back. Give `docker stop -t` (or terminationGracePeriodSeconds) more than that.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/dtq"]
CMD ["worker"]
