package stats

import (
	"slices"
	"strings"
	"time"
)

// loadFigures computes the time-weighted imbalance over [first sample, end], end being the later
// of duration and the last sample, and the chart series: the instantaneous imbalance and every
// worker's load as step functions, each extended to end.
//
// Every worker that appears in any sample counts in the mean, at 0 blocks until its first sample.
// Intervals where the mean is 0 (no worker holds a block) are left out of the average.
func loadFigures(samples []LoadSample, duration time.Duration) (float64, []Point, []WorkerLoad) {
	if len(samples) == 0 {
		return 0, nil, nil
	}
	ss := slices.Clone(samples)
	slices.SortStableFunc(ss, func(a, b LoadSample) int { return cmpDur(a.At, b.At) })

	var names []string
	index := make(map[string]int)
	for _, s := range ss {
		if _, ok := index[s.Worker]; !ok {
			index[s.Worker] = 0
			names = append(names, s.Worker)
		}
	}
	slices.SortFunc(names, naturalCompare)
	for i, n := range names {
		index[n] = i
	}
	nw := len(names)
	cur := make([]uint64, nw)
	var sum float64 // blocks; float so a hostile sample cannot overflow it
	now := func() float64 {
		if sum <= 0 {
			return 0
		}
		return finite(float64(slices.Max(cur)) * float64(nw) / sum)
	}

	end := max(duration, ss[len(ss)-1].At)
	var weighted, weight float64
	prev, prevRatio := ss[0].At, 0.0
	hold := func(until time.Duration) {
		if until > prev && prevRatio > 0 {
			dt := (until - prev).Seconds()
			weighted += prevRatio * dt
			weight += dt
		}
	}

	raw := make([][]Point, nw)
	var imb []Point
	changed := make([]bool, nw)
	for i := 0; i < len(ss); {
		t := ss[i].At
		hold(t)
		for ; i < len(ss) && ss[i].At == t; i++ {
			w := index[ss[i].Worker]
			sum += float64(ss[i].ActiveBlocks) - float64(cur[w])
			cur[w] = ss[i].ActiveBlocks
			changed[w] = true
		}
		for w := range changed {
			if changed[w] {
				raw[w] = append(raw[w], Point{X: t.Seconds(), Y: float64(cur[w])})
				changed[w] = false
			}
		}
		prev, prevRatio = t, now()
		imb = append(imb, Point{X: t.Seconds(), Y: prevRatio})
	}
	hold(end)
	if end > prev {
		imb = append(imb, Point{X: end.Seconds(), Y: prevRatio})
	}

	loads := make([]WorkerLoad, nw)
	for w, pts := range raw {
		if last := pts[len(pts)-1]; last.X < end.Seconds() {
			pts = append(pts, Point{X: end.Seconds(), Y: last.Y})
		}
		loads[w] = WorkerLoad{Worker: names[w], Points: DownsampleStep(pts, MaxLoadPoints)}
	}
	var mean float64
	if weight > 0 {
		mean = finite(weighted / weight)
	}
	return mean, DownsampleStep(imb, MaxImbalancePoints), loads
}

// DownsampleStep reduces a step series (each Y holds until the next point's X; X non-decreasing)
// to at most maxPoints, keeping peaks: the first and last points are kept, and the points between
// fall into maxPoints-2 buckets of equal X width, each represented by its point with the largest Y
// (the earliest on ties). It returns a copy. maxPoints below 2 is treated as 2.
func DownsampleStep(pts []Point, maxPoints int) []Point {
	maxPoints = max(maxPoints, 2)
	n := len(pts)
	if n <= maxPoints {
		return slices.Clone(pts)
	}
	first, last := pts[0], pts[n-1]
	buckets := maxPoints - 2
	span := last.X - first.X
	best := make([]int, buckets)
	for b := range best {
		best[b] = -1
	}
	if buckets > 0 && span > 0 {
		for i := 1; i < n-1; i++ {
			b := int((pts[i].X - first.X) / span * float64(buckets))
			b = min(max(b, 0), buckets-1)
			if best[b] < 0 || pts[i].Y > pts[best[b]].Y {
				best[b] = i
			}
		}
	}
	out := make([]Point, 0, maxPoints)
	out = append(out, first)
	for _, i := range best {
		if i >= 0 {
			out = append(out, pts[i])
		}
	}
	return append(out, last)
}

// naturalCompare orders labels with runs of digits compared as numbers, so decode-2 sorts before
// decode-10; labels equal that way fall back to plain string order.
func naturalCompare(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if isDigit(a[i]) && isDigit(b[j]) {
			si, sj := i, j
			for i < len(a) && isDigit(a[i]) {
				i++
			}
			for j < len(b) && isDigit(b[j]) {
				j++
			}
			x, y := strings.TrimLeft(a[si:i], "0"), strings.TrimLeft(b[sj:j], "0")
			if len(x) != len(y) {
				return cmpInt(len(x), len(y))
			}
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
			continue
		}
		if a[i] != b[j] {
			return cmpInt(int(a[i]), int(b[j]))
		}
		i, j = i+1, j+1
	}
	if c := cmpInt(len(a)-i, len(b)-j); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
