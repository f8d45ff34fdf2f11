package stats

import (
	"math"
	"slices"
	"time"
)

// sortedMs converts latencies to milliseconds and sorts them ascending.
func sortedMs(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	slices.Sort(out)
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Percentile returns the nearest-rank p-th percentile of ascending values: the smallest value
// such that at least p% of the values are at or below it, i.e. sorted[ceil(p/100*n)-1] (rank
// clamped to [1, n]). It returns 0 for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

func percentiles(sorted []float64) Percentiles {
	if len(sorted) == 0 {
		return Percentiles{}
	}
	var sum float64
	for _, v := range sorted {
		sum += v
	}
	return Percentiles{
		P50:  Percentile(sorted, 50),
		P90:  Percentile(sorted, 90),
		P99:  Percentile(sorted, 99),
		Mean: finite(sum / float64(len(sorted))),
	}
}

// cdf returns the empirical CDF of ascending values, (value, i/n) for the i-th value, reduced to
// at most maxPoints by keeping evenly spaced ranks (always the first and the last). The result is
// non-decreasing in both X and Y and ends at Y = 1.
func cdf(sorted []float64, maxPoints int) []Point {
	n := len(sorted)
	pts := make([]Point, n)
	for i, v := range sorted {
		pts[i] = Point{X: v, Y: float64(i+1) / float64(n)}
	}
	return Downsample(pts, maxPoints)
}

// Downsample keeps at most maxPoints of pts at evenly spaced indices, always including the first
// and the last; it returns a copy. Order is preserved, so a monotone series stays monotone.
// maxPoints below 2 is treated as 2.
func Downsample(pts []Point, maxPoints int) []Point {
	maxPoints = max(maxPoints, 2)
	n := len(pts)
	if n <= maxPoints {
		return slices.Clone(pts)
	}
	out := make([]Point, maxPoints)
	for k := range maxPoints {
		// Rounded even spacing over [0, n-1]: k = 0 maps to 0, k = maxPoints-1 to n-1, and
		// indices strictly increase because n-1 > maxPoints-1.
		i := (k*(n-1) + (maxPoints-1)/2) / (maxPoints - 1)
		out[k] = pts[i]
	}
	return out
}
