// Package groundtruth reads real-GPU measurements of single vLLM instances
// (schema switchyard-groundtruth/v1: one folder per experiment with an
// experiment.json and, for per-request sets, a requests.jsonl) so the engine
// model can be validated and fitted against them.
//
// The measurements cannot be redistributed with the project. They live in
// one directory, named by SWITCHYARD_GROUNDTRUTH_DIR (default
// ../shared/data/groundtruth, beside the project root); tests and the
// command line find them through this package, never through a copy.
package groundtruth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"switchyard/internal/traces"
)

const (
	// EnvDir names the ground-truth directory.
	EnvDir = "SWITCHYARD_GROUNDTRUTH_DIR"
	// DefaultDir is the ground-truth directory when EnvDir is unset,
	// relative to the project root.
	DefaultDir = "../shared/data/groundtruth"
	// Calibration is the sub-folder holding the calibration experiments.
	Calibration = "calibration"
)

// Dir is the ground-truth directory: EnvDir when set, DefaultDir otherwise.
// A relative directory is taken from the project root, so tests (which run
// in their package's directory) and commands run from the root agree.
func Dir() string {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		dir = DefaultDir
	}
	if filepath.IsAbs(dir) {
		return filepath.Clean(dir)
	}
	return filepath.Join(traces.Root(), dir)
}

// CalibrationDir is the folder of calibration experiments.
func CalibrationDir() string { return filepath.Join(Dir(), Calibration) }

// Hint says where the measurements come from and where they belong.
func Hint() string {
	return fmt.Sprintf("The ground-truth measurements are not part of the project: put the folder "+
		"(README.md and %s/<experiment>/experiment.json) in $%s (default %s beside the project root).",
		Calibration, EnvDir, DefaultDir)
}

// FindCalibration returns the calibration folder, or an error saying where
// it was looked for.
func FindCalibration() (string, error) {
	dir := CalibrationDir()
	info, err := os.Stat(dir)
	switch {
	case err == nil && info.IsDir():
		return dir, nil
	case err == nil:
		return "", fmt.Errorf("%s is not a directory. %s", dir, Hint())
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("ground-truth calibration set not found at %s. %s", dir, Hint())
	default:
		return "", fmt.Errorf("ground-truth calibration set: %w. %s", err, Hint())
	}
}

// RequireCalibration returns the calibration folder for a test that needs
// it. When it is missing the test is skipped, or fails when the CI
// environment variable is set: CI has the data, so a missing folder there
// is a broken setup, not an optional test.
func RequireCalibration(tb testing.TB) string {
	tb.Helper()
	dir, err := FindCalibration()
	if err == nil {
		return dir
	}
	if os.Getenv("CI") != "" {
		tb.Fatalf("%v (CI is set, so this test may not skip)", err)
	}
	tb.Skip(err)
	return ""
}
