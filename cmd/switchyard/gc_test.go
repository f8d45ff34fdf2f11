package main

import "testing"

// Simulating commands collect at Go's default; the servers keep the
// proxy's higher GC percent.
func TestGCPercentByCommand(t *testing.T) {
	root := newRootCmd()
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"sim"}, offlineGCPercent},
		{[]string{"bench", "pickers"}, offlineGCPercent},
		{[]string{"bench", "replicas"}, offlineGCPercent},
		{[]string{"tune"}, offlineGCPercent},
		{[]string{"engine", "fit"}, offlineGCPercent},
		{[]string{"serve"}, defaultGCPercent},
		{[]string{"epp"}, defaultGCPercent},
		{[]string{"demo"}, defaultGCPercent},
	} {
		cmd, _, err := root.Find(c.args)
		if err != nil || cmd.Name() != c.args[len(c.args)-1] {
			t.Fatalf("%v: found %v, %v", c.args, cmd.Name(), err)
		}
		if got := gcPercentFor(cmd); got != c.want {
			t.Errorf("%v: GC percent %d, want %d", c.args, got, c.want)
		}
	}
}
