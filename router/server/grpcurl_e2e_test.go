package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/fleet"
	"switchyard/router/config"
	"switchyard/router/epp"
)

// grpcurlEnv names the grpcurl binary the tests run; the Makefile sets it
// to what hack/grpcurl/build.sh builds.
const grpcurlEnv = "SWITCHYARD_GRPCURL"

// grpcurlBinary is the independent gRPC client. Its absence fails the test:
// a skipped peer would let the endpoint picker's wire format go unchecked.
func grpcurlBinary(t *testing.T) string {
	t.Helper()
	path := os.Getenv(grpcurlEnv)
	if path == "" {
		t.Fatalf("%s is not set: run `make grpcurl` and %s=$(hack/grpcurl/build.sh --path), or run the tests through `make test`",
			grpcurlEnv, grpcurlEnv)
	}
	if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		t.Fatalf("%s=%s is not an executable grpcurl: run `make grpcurl` (hack/grpcurl/build.sh) to build it", grpcurlEnv, path)
	}
	return path
}

// grpcurl runs the client with stdin and returns what it printed.
func grpcurl(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, grpcurlBinary(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("grpcurl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// grpcurl, a client written apart from this project, sees the endpoint
// picker as a gateway would: reflection lists the ext_proc and health
// services, readiness is SERVING once discovery has synced, and one
// ext_proc exchange written as protojson (request headers, then the chat
// body ending the stream) is answered with the destination as a header
// and as envoy.lb metadata, equal, and Dynamo's worker pin.
func TestGRPCurlDrivesTheEndpointPicker(t *testing.T) {
	grpcurlBinary(t)
	k := startKVStack(t, fleet.Spec{Aggregated: 1}, func(cfg *config.Config) Options { withEPP(cfg); return Options{} })
	addr := k.srv.EPPAddr()

	out, err := grpcurl(t, "", "-plaintext", addr, "list")
	require.NoError(t, err)
	require.Contains(t, strings.Fields(out), epp.HealthService)
	require.Contains(t, strings.Fields(out), "grpc.health.v1.Health")

	eventually(t, "readiness SERVING through grpcurl", func() bool {
		out, err := grpcurl(t, "", "-plaintext", "-d", `{"service":"readiness"}`, addr, "grpc.health.v1.Health/Check")
		return err == nil && strings.Contains(out, `"SERVING"`)
	})

	chat := fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":"hello"}]}`, kvModel)
	stdin := fmt.Sprintf(`{"request_headers":{"headers":{"headers":[{"key":":method","raw_value":%q},{"key":":path","raw_value":%q}]},"end_of_stream":false}}
{"request_body":{"body":%q,"end_of_stream":true}}
`, b64("POST"), b64("/v1/chat/completions"), b64(chat))
	out, err = grpcurl(t, stdin, "-plaintext", "-d", "@", addr, "envoy.service.ext_proc.v3.ExternalProcessor/Process")
	require.NoError(t, err)
	headers, lb := routedAnswer(t, out)
	require.Contains(t, headers, epp.HeaderWorkerID)
	require.Equal(t, k.srv.Discovery().Snapshot().Workers[0].InstanceID, parseUint(t, headers[epp.HeaderWorkerID]))
	require.NotEmpty(t, headers[epp.DestinationHeader])
	require.Equal(t, headers[epp.DestinationHeader], lb, "the destination header and the envoy.lb metadata agree")
}

// The endpoint picker serves TLS by default, with a certificate gateways
// (and grpcurl -insecure) accept without verifying it.
func TestGRPCurlOverDefaultTLS(t *testing.T) {
	grpcurlBinary(t)
	k := startKVStack(t, fleet.Spec{Aggregated: 1}, func(cfg *config.Config) Options {
		withEPP(cfg)
		cfg.EPP.Plaintext = false
		return Options{}
	})
	out, err := grpcurl(t, "", "-insecure", k.srv.EPPAddr(), "list")
	require.NoError(t, err)
	require.Contains(t, strings.Fields(out), epp.HealthService)
	_, err = grpcurl(t, "", "-plaintext", k.srv.EPPAddr(), "list")
	require.Error(t, err, "a plaintext client cannot talk to the TLS listener")
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func parseUint(t *testing.T, s string) uint64 {
	t.Helper()
	var n uint64
	_, err := fmt.Sscan(s, &n)
	require.NoError(t, err, "%q", s)
	return n
}

// routedAnswer reads grpcurl's printed ProcessingResponses (protojson, one
// object after another) and returns the headers the request-headers answer
// sets (values decoded) and its envoy.lb destination.
func routedAnswer(t *testing.T, out string) (map[string]string, string) {
	t.Helper()
	type headerOption struct {
		Header struct {
			Key      string `json:"key"`
			Value    string `json:"value"`
			RawValue []byte `json:"rawValue"`
		} `json:"header"`
	}
	type response struct {
		RequestHeaders *struct {
			Response struct {
				HeaderMutation struct {
					SetHeaders []headerOption `json:"setHeaders"`
				} `json:"headerMutation"`
			} `json:"response"`
		} `json:"requestHeaders"`
		DynamicMetadata map[string]map[string]any `json:"dynamicMetadata"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var r response
		err := dec.Decode(&r)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "grpcurl printed:\n%s", out)
		if r.RequestHeaders == nil {
			continue
		}
		headers := map[string]string{}
		for _, h := range r.RequestHeaders.Response.HeaderMutation.SetHeaders {
			headers[h.Header.Key] = h.Header.Value + string(h.Header.RawValue)
		}
		lb, _ := r.DynamicMetadata[epp.LBNamespace][epp.DestinationHeader].(string)
		return headers, lb
	}
	require.FailNow(t, "no request-headers answer", "grpcurl printed:\n%s", out)
	return nil, ""
}
