package main

import "github.com/spf13/cobra"

func init() { register(newEngineCmd) }

// engineSubcommands is filled by each engine command file's init.
var engineSubcommands []func() *cobra.Command

func registerEngine(f func() *cobra.Command) { engineSubcommands = append(engineSubcommands, f) }

func newEngineCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "engine",
		Short: "Check the engine timing model against real GPU runs",
	}
	for _, f := range engineSubcommands {
		cmd.AddCommand(f())
	}
	return cmd
}
