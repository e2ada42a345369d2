# syntax=docker/dockerfile:1
# Cairn in a container: a static binary on a distroless base (no shell, no
# package manager), run as a non-root user, data in a volume.
#
#   docker build -t cairn --build-arg VERSION=$(git describe --tags --always) .
#   docker run -p 9000:9000 -v cairn-data:/var/lib/cairn cairn
#
# The default command is a standalone node (all roles, embedded etcd). Give
# other flags as arguments, e.g. `cairn --role storage --etcd-endpoints ...`;
# deploy/docker-compose.yml runs a full cluster.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so a code change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/cairn ./cmd/cairn \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot AS runtime
COPY --from=build /out/cairn /usr/local/bin/cairn
# The data directory belongs to the nonroot user (65532) before the volume is
# mounted, so a fresh named volume inherits it.
COPY --from=build --chown=65532:65532 /out/data /var/lib/cairn
ENV CAIRN_DATA_DIR=/var/lib/cairn \
    CAIRN_HTTP_ADDR=0.0.0.0:9000 \
    CAIRN_LOG_FORMAT=json
USER 65532:65532
VOLUME ["/var/lib/cairn"]
# 9000: API, console, metrics, data plane; 2379/2380: the embedded etcd
# member's client and peer URLs (roles with etcd only).
EXPOSE 9000 2379 2380
# `cairn health` GETs /api/v1/health on $CAIRN_HTTP_ADDR: no shell or curl
# needed in the image.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["/usr/local/bin/cairn", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/cairn"]
