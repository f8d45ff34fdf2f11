package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"switchyard/router/config"
	"switchyard/router/server"
)

func init() { register(newServeCmd) }

type logFlags struct{ level, format string }

func (f *logFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.level, "log-level", "info", "log level: debug, info, warn, error")
	cmd.Flags().StringVar(&f.format, "log-format", "text", "log format: text or json")
}

func (f *logFlags) logger() (*slog.Logger, error) { return f.loggerTo(os.Stderr) }

// loggerTo logs to w (a command's error stream, which tests capture).
func (f *logFlags) loggerTo(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch f.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, not %q", f.format)
}

func newServeCmd() *cobra.Command {
	var (
		path, record string
		logs         logFlags
	)
	cmd := &cobra.Command{
		Use:   "serve --config FILE [--record FILE]",
		Short: "Run the router: discovery, metrics and the admin API",
		Long: "Run the router with the configuration in FILE. The file is watched: a valid\n" +
			"change is applied live; an invalid one, an empty file, or one that would remove\n" +
			"every backend, disable Dynamo or switch the admin API off is logged and the\n" +
			"running configuration kept (restart with such a file to apply it).\n" +
			"--record FILE records every input and decision of the routing core to SQLite;\n" +
			"`switchyard replay FILE` checks it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.loggerTo(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			cfg, err := config.Load(path)
			if err != nil {
				return &exitError{1, err}
			}
			return runServer(cmd, log, cfg, path, record, server.Options{}, nil)
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "", "configuration file (YAML)")
	_ = cmd.MarkFlagRequired("config")
	cmd.Flags().StringVar(&record, "record", "", "record the routing core's inputs and decisions to this SQLite file")
	logs.add(cmd)
	return cmd
}

// runServer runs a router with cfg until SIGINT or SIGTERM: recording to
// record when set, watching path for reloads when set. started, when set,
// is told once the router serves.
func runServer(cmd *cobra.Command, log *slog.Logger, cfg *config.Config, path, record string, o server.Options,
	started func(*server.Server)) error {
	o.Seed = newPickerSeed()
	rec, err := startRecording(record, cfg, o.Seed, log)
	if err != nil {
		return &exitError{1, err}
	}
	o.Recorder = rec
	srv, err := server.NewWithOptions(cfg, log, o)
	if err != nil {
		stopRecording(rec, log)
		return &exitError{1, err}
	}
	defer func() {
		srv.Close()
		stopRecording(rec, log)
	}()
	if started != nil {
		started(srv)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if path != "" {
		go func() {
			if err := srv.WatchConfigFile(ctx, path); err != nil {
				log.Warn("config file is not watched; reloads need a restart", "error", err)
			}
		}()
	}
	<-ctx.Done()
	log.Info("shutting down")
	return nil
}
