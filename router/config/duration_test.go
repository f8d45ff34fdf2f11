package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestDurationText(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"500ms": 500 * time.Millisecond, "30s": 30 * time.Second, "5m": 5 * time.Minute,
		"1h30m": 90 * time.Minute, "0s": 0, "1.5s": 1500 * time.Millisecond,
	} {
		d, err := parseDuration(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, d.Std(), in)
		back, err := parseDuration(d.String())
		require.NoError(t, err)
		assert.Equal(t, d, back, "String round-trips")
	}
	assert.Equal(t, "5m", Duration(5*time.Minute).String())
	assert.Equal(t, "2h", Duration(2*time.Hour).String())
	assert.Equal(t, "1h1m", Duration(time.Hour+time.Minute).String())
	assert.Equal(t, "500ms", Duration(500*time.Millisecond).String())
	for _, bad := range []string{"3", "", "fast", "1 s"} {
		_, err := parseDuration(bad)
		assert.Error(t, err, bad)
	}
}

func TestDurationPlainYAML(t *testing.T) {
	var v struct {
		D Duration `yaml:"d"`
	}
	require.NoError(t, yaml.Unmarshal([]byte("d: 250ms\n"), &v))
	assert.Equal(t, 250*time.Millisecond, v.D.Std())
	out, err := yaml.Marshal(v)
	require.NoError(t, err)
	assert.Equal(t, "d: 250ms\n", string(out))
	assert.Error(t, yaml.Unmarshal([]byte("d: 3\n"), &v))
	assert.Error(t, yaml.Unmarshal([]byte("d: [1s]\n"), &v))
}
