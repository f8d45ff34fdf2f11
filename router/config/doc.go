// Package config is Switchyard's configuration file: the YAML schema, its
// defaults, strict decoding with field paths, ${ENV} expansion, validation
// (errors and warnings, each naming the field), masking for readback, and
// the reload class of a change to the discovery settings.
//
// The package only describes configuration. It starts nothing, and nothing
// in it reads the clock or the network, so the core can depend on it.
package config
