package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"switchyard/router/config"
)

func init() { register(newConfigCmd) }

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check and inspect configuration files",
	}
	cmd.AddCommand(newConfigValidateCmd(), newConfigShowCmd())
	return cmd
}

func newConfigValidateCmd() *cobra.Command {
	var kind string
	cmd := &cobra.Command{
		Use:   "validate FILE",
		Short: "Report every error and warning in a configuration file",
		Long: "Parses FILE (expanding ${VAR} from the environment), prints each warning\n" +
			"and error with the field it concerns, and exits 1 if there is any error.\n" +
			"FILE is a router configuration (serve) or a fake-fleet file (fleet); --kind auto\n" +
			"tells them apart by their top-level keys.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, path := cmd.OutOrStdout(), args[0]
			k, err := fileKind(path, kind)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			if k == kindFleet {
				return validateFleetFile(out, path)
			}
			c, err := loadConfig(out, path)
			if err != nil {
				return err
			}
			errs, warns := c.Validate()
			return reportIssues(out, path, "config", errs, warns)
		},
	}
	cmd.Flags().StringVar(&kind, "kind", kindAuto, "the kind of FILE: auto, router (serve --config) or fleet (fleet --config)")
	return cmd
}

// Kinds of configuration file config validate knows.
const (
	kindAuto   = "auto"
	kindRouter = "router"
	kindFleet  = "fleet"
)

// fileKind resolves --kind: auto reads the file's top-level keys, and
// anything that is not clearly a fleet file is checked as a router one.
func fileKind(path, kind string) (string, error) {
	switch kind {
	case kindRouter, kindFleet:
		return kind, nil
	case kindAuto:
	default:
		return "", fmt.Errorf("--kind must be auto, router or fleet, not %q", kind)
	}
	data, err := config.ReadFile(path)
	if err != nil {
		return "", err
	}
	keys, err := config.TopLevelKeys(data)
	if err == nil && looksLikeFleetFile(keys) {
		return kindFleet, nil
	}
	return kindRouter, nil // parse errors are reported by the router loader
}

// validateFleetFile is config validate for a fleet file.
func validateFleetFile(out io.Writer, path string) error {
	ff, err := loadFleetFile(path)
	if err != nil {
		return parseFailure(out, path, err)
	}
	errs, warns := ff.validate()
	return reportIssues(out, path, "fleet config", errs, warns)
}

// reportIssues prints warnings then errors, and the verdict.
func reportIssues(out io.Writer, path, what string, errs, warns []config.Issue) error {
	for _, w := range warns {
		fmt.Fprintln(out, "warning:", w)
	}
	for _, e := range errs {
		fmt.Fprintln(out, "error:", e)
	}
	if len(errs) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%s: %d configuration errors", path, len(errs))}
	}
	fmt.Fprintf(out, "%s OK (%d warnings)\n", what, len(warns))
	return nil
}

func newConfigShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show FILE",
		Short: "Print the effective configuration, defaults filled and secrets masked",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := loadConfig(cmd.OutOrStdout(), args[0])
			if err != nil {
				return err
			}
			b, err := c.Masked().YAML()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
}

// loadConfig loads path; on a decoding failure it prints every problem as
// an "error:" line, like validation errors, and returns an exit status 1.
func loadConfig(out io.Writer, path string) (*config.Config, error) {
	c, err := config.Load(path)
	if err != nil {
		return nil, parseFailure(out, path, err)
	}
	return c, nil
}

// parseFailure prints a *config.ParseError's problems as "error:" lines;
// every failure becomes exit status 1.
func parseFailure(out io.Writer, path string, err error) error {
	var pe *config.ParseError
	if !errors.As(err, &pe) {
		return &exitError{code: 1, err: err}
	}
	for _, fe := range pe.Errors {
		fmt.Fprintln(out, "error:", fe)
	}
	return &exitError{code: 1, err: fmt.Errorf("%s: %d errors while reading the file", path, len(pe.Errors))}
}
