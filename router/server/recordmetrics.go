package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"switchyard/recorder"
)

// recorderCollector exports the writer's counts at scrape time.
type recorderCollector struct{ w *recorder.Writer }

var (
	recordsDesc = prometheus.NewDesc("switchyard_recorder_records_total",
		"Records written to the recording (--record), by table.", []string{"table"}, nil)
	recordDropsDesc = prometheus.NewDesc("switchyard_recorder_dropped_total",
		"Records the recording lost (queue full, failed write), by table. A recording with drops cannot be replayed.", []string{"table"}, nil)
	recordQueueDesc = prometheus.NewDesc("switchyard_recorder_queued",
		"Records waiting to be written to the recording.", nil, nil)
)

// Describe implements prometheus.Collector.
func (recorderCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- recordsDesc
	ch <- recordDropsDesc
	ch <- recordQueueDesc
}

// Collect implements prometheus.Collector.
func (c recorderCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.w.Stats()
	for _, t := range recorder.Tables() {
		ch <- prometheus.MustNewConstMetric(recordsDesc, prometheus.CounterValue, float64(st.Written[t]), t)
		ch <- prometheus.MustNewConstMetric(recordDropsDesc, prometheus.CounterValue, float64(st.Dropped[t]), t)
	}
	ch <- prometheus.MustNewConstMetric(recordQueueDesc, prometheus.GaugeValue, float64(st.Queued))
}
