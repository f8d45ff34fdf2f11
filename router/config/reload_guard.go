package config

// ReloadRefusal reports why a configuration file read on a live reload
// must not replace old, or "" when it may. Each refused change is one a
// truncated or half-written file produces (an empty document is all
// defaults: no backends, Dynamo and the admin API off), and applying it
// would silently stop a serving router. Such changes are made
// deliberately by restarting the process with the new file.
func ReloadRefusal(old, new *Config) string {
	switch {
	case len(old.Backends) > 0 && len(new.Backends) == 0:
		return "it removes every backend"
	case old.Dynamo.Enabled && !new.Dynamo.Enabled:
		return "it disables Dynamo (dynamo.enabled: false)"
	case old.Admin.Token != "" && new.Admin.Token == "":
		return "it switches the admin API off (admin.token empty)"
	}
	return ""
}
