package artifacts

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// The blob cache: <dir>/blobs/<checksum>, the directory owner-only (0700),
// each blob 0600, written to a temporary file and renamed into place so a
// reader never sees half a blob. Every read is verified; a blob that no
// longer hashes to its name is removed.

func blobPath(dir string, c Checksum) string {
	return filepath.Join(dir, "blobs", string(c))
}

// readBlob returns a verified blob, or false when there is none or it was
// evicted (counted corrupt).
func (s *Store) readBlob(dir string, c Checksum) ([]byte, bool) {
	p := blobPath(dir, c)
	data, err := readLocal(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	if err == nil && Sum(data) == c {
		return data, true
	}
	s.metrics.Count(ResultCorrupt)
	s.log.Warn("artifact cache blob failed verification; evicted and fetched again", "checksum", c, "blob", p, "err", err)
	if rmErr := os.Remove(p); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
		s.log.Warn("could not evict artifact cache blob", "blob", p, "err", rmErr)
	}
	return nil, false
}

func writeBlob(dir string, c Checksum, data []byte) error {
	blobs := filepath.Join(dir, "blobs")
	if err := os.MkdirAll(blobs, 0o700); err != nil {
		return err
	}
	// MkdirAll leaves an existing directory's mode alone; the blobs are the
	// router's own, so tighten it.
	if err := os.Chmod(blobs, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(blobs, ".partial-*") // created 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), blobPath(dir, c))
}
