package worker

import "time"

// The mocker's default polynomial performance model (dynamo-wire §9.1).

// prefillMillis is the time to prefill n new tokens in one batch.
func prefillMillis(n int) float64 {
	if n <= 0 {
		return 0
	}
	x := float64(n)
	return 4.209989e-07*x*x + 1.518344e-02*x + 16.50142
}

// decodeStepMillis is one decode step's time at KV fraction p (blocks
// held over the rank's total), floored at 1 ms as in the mocker.
func decodeStepMillis(p float64) float64 {
	return max(1, -25.74*p*p+54.01*p+5.74)
}

// scaled turns modelled milliseconds into a wait, divided by the speedup.
func scaled(ms, speedup float64) time.Duration {
	return time.Duration(ms / speedup * float64(time.Millisecond))
}
