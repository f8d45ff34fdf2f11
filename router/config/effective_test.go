package config

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEffectiveArtifactCacheDir(t *testing.T) {
	base := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", base)
	dir, err := Default().Dynamo.KV.EffectiveArtifactCacheDir()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(base, "switchyard", "artifacts"), dir)

	kv := KV{ArtifactCacheDir: "/srv/artifacts"}
	dir, err = kv.EffectiveArtifactCacheDir()
	require.NoError(t, err)
	assert.Equal(t, "/srv/artifacts", dir, "an explicit directory wins")
}

func TestEffectiveArtifactCacheDirWithoutHome(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	_, err := Default().Dynamo.KV.EffectiveArtifactCacheDir()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "artifact_cache_dir")
}
