package config

// inactiveFeatures lists configuration this build parses and validates but
// does not act on yet. Each row warns when the configuration asks for the
// feature. Delete a row in the change that makes its feature work.
var inactiveFeatures = []struct {
	path      string
	requested func(*Config) bool
	message   string
}{
	{
		path:      "dynamo.load.transport",
		requested: func(c *Config) bool { return c.Dynamo.Enabled && c.Dynamo.Load.Transport == TransportBroker },
		message:   "not active yet: no broker agent is in this build (switchyard broker), so subscriptions stay pending until a broker session covers their namespace, and are never dialed directly",
	},
}

func (k *checker) inactive(c *Config) {
	for _, f := range inactiveFeatures {
		if f.requested(c) {
			k.warn(f.path, "%s", f.message)
		}
	}
}
