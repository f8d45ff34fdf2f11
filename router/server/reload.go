package server

import (
	"context"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/config"
	"switchyard/router/config/filewatch"
)

// Results of a reload from the watched file: the values of the result
// label of switchyard_config_reloads_total.
const (
	reloadApplied = "applied"
	// reloadRejected: the file does not parse or does not validate.
	reloadRejected = "rejected"
	// reloadRefused: the file is valid but empty, or would switch off
	// what a serving router runs on (config.ReloadRefusal).
	reloadRefused = "refused"
)

// configFileDebounce lets a burst of writes settle before the file is read.
const configFileDebounce = 250 * time.Millisecond

func newReloadCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_config_reloads_total",
		Help: "Reloads of the watched configuration file by result (applied, rejected: invalid, refused: empty or switching everything off).",
	}, []string{"result"})
	for _, r := range []string{reloadApplied, reloadRejected, reloadRefused} {
		c.WithLabelValues(r)
	}
	reg.MustRegister(c)
	return c
}

// WatchConfigFile applies each settled change of the file at path until
// ctx is done (see ReloadFile). It returns an error only when the file
// cannot be watched at all.
func (s *Server) WatchConfigFile(ctx context.Context, path string) error {
	return filewatch.Watch(ctx, path, configFileDebounce, func(content []byte) {
		s.ReloadFile(path, content)
	})
}

// ReloadFile applies the content of the configuration file at path, as
// read by the watcher, and reports the result (one of the counter's
// labels). An invalid file is rejected; an empty one (blank, comments
// only) or one that would remove every backend, disable Dynamo or switch
// the admin API off is refused: a truncated or half-written file looks
// exactly like that, and applying it would stop a serving router. Either
// way the running configuration is kept; a restart applies such a file
// deliberately.
func (s *Server) ReloadFile(path string, content []byte) string {
	result := s.reloadFile(path, content)
	s.reloads.WithLabelValues(result).Inc()
	return result
}

func (s *Server) reloadFile(path string, content []byte) string {
	refuse := func(why string) string {
		s.log.Warn("config reload refused; keeping the running configuration (restart with the file to apply it deliberately)",
			"file", path, "reason", why)
		return reloadRefused
	}
	if config.IsEmpty(content) {
		return refuse("the file is empty (blank or comments only)")
	}
	next, err := config.Parse(content, os.LookupEnv)
	if err == nil && s.overlay != nil {
		err = s.overlay(next)
	}
	if err != nil {
		s.log.Error("config reload rejected; keeping the running configuration", "file", path, "error", err)
		return reloadRejected
	}
	if errs, _ := next.Validate(); len(errs) > 0 {
		// Reported as invalid, with its errors, before any refusal.
		for _, e := range errs {
			s.log.Error("config reload rejected; keeping the running configuration", "file", path, "issue", e.String())
		}
		return reloadRejected
	}
	if why := config.ReloadRefusal(s.cfg.Load(), next); why != "" {
		return refuse(why)
	}
	if s.Reload(next) != nil {
		return reloadRejected // not reached: next validated above
	}
	return reloadApplied
}
