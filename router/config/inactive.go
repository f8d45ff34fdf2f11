package config

// inactiveFeatures lists configuration this build parses and validates but
// does not act on yet. Each row warns when the configuration asks for the
// feature. Delete a row in the change that makes its feature work.
var inactiveFeatures = []struct {
	path      string
	requested func(*Config) bool
	message   string
}{}

func (k *checker) inactive(c *Config) {
	for _, f := range inactiveFeatures {
		if f.requested(c) {
			k.warn(f.path, "%s", f.message)
		}
	}
}
