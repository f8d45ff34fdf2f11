// Package kubernetes holds the router's Kubernetes manifests; its test
// checks them against the router itself.
package kubernetes

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"switchyard/router/config"
	"switchyard/router/server"
)

// object is the part of a manifest the test reads.
type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Template struct {
			Spec struct {
				Containers []container `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
		Ports []struct {
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type container struct {
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe probe `yaml:"readinessProbe"`
	LivenessProbe  probe `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

// readManifests decodes every document of every file kustomization.yaml lists.
func readManifests(t *testing.T) map[string]object {
	b, err := os.ReadFile("kustomization.yaml")
	require.NoError(t, err)
	var k struct {
		Resources []string `yaml:"resources"`
	}
	require.NoError(t, yaml.Unmarshal(b, &k))
	require.NotEmpty(t, k.Resources)
	out := map[string]object{}
	for _, r := range k.Resources {
		b, err := os.ReadFile(r)
		require.NoError(t, err, "kustomization.yaml lists %s", r)
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o object
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, r)
			require.NotEmpty(t, o.Kind, r)
			out[o.Kind] = o
		}
	}
	for _, kind := range []string{"Deployment", "Service", "ConfigMap"} {
		require.Contains(t, out, kind)
	}
	return out
}

// The ConfigMap's file validates with the router's own loader, the
// Deployment mounts it where its args read it, and both probes name the
// container's port and paths the router answers: /health 200 while the
// configured etcd is unreachable, /ready 503 (nothing discovered yet).
func TestManifests(t *testing.T) {
	objs := readManifests(t)
	cm, dep := objs["ConfigMap"], objs["Deployment"]
	const file = "switchyard.yaml"
	require.Contains(t, cm.Data, file)
	cfg, err := config.Parse([]byte(cm.Data[file]), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	errs, _ := cfg.Validate()
	require.Empty(t, errs)

	spec := dep.Spec.Template.Spec
	require.Len(t, spec.Containers, 1)
	c := spec.Containers[0]
	require.Len(t, spec.Volumes, 1)
	require.Equal(t, cm.Metadata.Name, spec.Volumes[0].ConfigMap.Name)
	require.Len(t, c.VolumeMounts, 1)
	require.Equal(t, spec.Volumes[0].Name, c.VolumeMounts[0].Name)
	require.Contains(t, c.Args, c.VolumeMounts[0].MountPath+"/"+file)

	require.Len(t, c.Ports, 1)
	_, port, err := net.SplitHostPort(cfg.Server.BindAddress)
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(c.Ports[0].ContainerPort), port, "the container port is the one the router binds")
	require.Equal(t, c.Ports[0].Name, c.ReadinessProbe.HTTPGet.Port)
	require.Equal(t, c.Ports[0].Name, c.LivenessProbe.HTTPGet.Port)
	require.Equal(t, c.Ports[0].Name, objs["Service"].Spec.Ports[0].TargetPort)
	require.Equal(t, "/ready", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/health", c.LivenessProbe.HTTPGet.Path)

	// The very configuration, on a loopback port, against nothing.
	cfg.Server.BindAddress = "127.0.0.1:0"
	srv, err := server.New(cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer srv.Close()
	base := "http://" + srv.Addr()
	require.Equal(t, http.StatusOK, status(t, base+c.LivenessProbe.HTTPGet.Path))
	require.Equal(t, http.StatusServiceUnavailable, status(t, base+c.ReadinessProbe.HTTPGet.Path))
}

func status(t *testing.T, url string) int {
	resp, err := http.Get(url)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}
