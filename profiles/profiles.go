// Package profiles serves the engine profiles shipped in this folder, so
// that a binary run anywhere can name the calibrated coefficients.
package profiles

import (
	_ "embed"

	"switchyard/fakefleet/engine/perf"
)

//go:embed calibrated.json
var calibrated []byte

// CalibratedName is how commands name the embedded calibrated profile.
const CalibratedName = "calibrated"

// Calibrated returns profiles/calibrated.json: the coefficients fitted on
// the calibration set by the procedure docs/engine-model.md validates.
func Calibrated() (perf.Profile, error) {
	return perf.ParseProfile(calibrated)
}
