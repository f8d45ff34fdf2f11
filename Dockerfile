# The router as a container image, for deploy/kubernetes:
#   docker build --build-arg VERSION=$(git describe --always) -t REGISTRY/switchyard:TAG .
# Pure Go (SQLite included), so the binary is static and the runtime image
# holds nothing else; it runs as the non-root user 65532 the Deployment asks for.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=${VERSION}" -o /switchyard ./cmd/switchyard

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /switchyard /switchyard
USER 65532:65532
ENTRYPOINT ["/switchyard"]
