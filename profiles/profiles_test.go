package profiles

import (
	"reflect"
	"testing"

	"switchyard/fakefleet/engine/perf"
)

func TestCalibratedIsTheFileAndCarriesItsFit(t *testing.T) {
	got, err := Calibrated()
	if err != nil {
		t.Fatal(err)
	}
	file, err := perf.LoadProfile("calibrated.json")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, file) {
		t.Fatalf("embedded profile differs from calibrated.json")
	}
	if got.Fit == nil || len(got.Fit.Experiments) == 0 || got.Coefficients.MatmulEfficiency <= 0 {
		t.Fatalf("the calibrated profile has no fit record or coefficients: %+v", got)
	}
}
