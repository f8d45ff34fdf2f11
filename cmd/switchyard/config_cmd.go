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
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Report every error and warning in a configuration file",
		Long: "Parses FILE (expanding ${VAR} from the environment), prints each warning\n" +
			"and error with the field it concerns, and exits 1 if there is any error.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			c, err := loadConfig(out, args[0])
			if err != nil {
				return err
			}
			errs, warns := c.Validate()
			for _, w := range warns {
				fmt.Fprintln(out, "warning:", w)
			}
			for _, e := range errs {
				fmt.Fprintln(out, "error:", e)
			}
			if len(errs) > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%s: %d configuration errors", args[0], len(errs))}
			}
			fmt.Fprintf(out, "config OK (%d warnings)\n", len(warns))
			return nil
		},
	}
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
	if err == nil {
		return c, nil
	}
	var pe *config.ParseError
	if !errors.As(err, &pe) {
		return nil, &exitError{code: 1, err: err}
	}
	for _, fe := range pe.Errors {
		fmt.Fprintln(out, "error:", fe)
	}
	return nil, &exitError{code: 1, err: fmt.Errorf("%s: %d errors while reading the file", path, len(pe.Errors))}
}
