package config

import (
	"bytes"
	"reflect"

	"gopkg.in/yaml.v3"
)

// Mask replaces a secret in readbacks.
const Mask = "****"

// Clone returns a deep copy that shares no memory with c.
func (c *Config) Clone() *Config {
	out := new(Config)
	deepCopy(reflect.ValueOf(out).Elem(), reflect.ValueOf(c).Elem())
	return out
}

// deepCopy copies src into dst, allocating fresh pointers, slices and maps.
// Reflection keeps Clone correct as the schema grows; the schema has no
// unexported fields, which reflection could not set.
func deepCopy(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		p := reflect.New(src.Type().Elem())
		deepCopy(p.Elem(), src.Elem())
		dst.Set(p)
	case reflect.Struct:
		for i := range src.NumField() {
			deepCopy(dst.Field(i), src.Field(i))
		}
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		for i := range src.Len() {
			deepCopy(s.Index(i), src.Index(i))
		}
		dst.Set(s)
	case reflect.Map:
		if src.IsNil() {
			return
		}
		m := reflect.MakeMapWithSize(src.Type(), src.Len())
		for it := src.MapRange(); it.Next(); {
			v := reflect.New(src.Type().Elem()).Elem()
			deepCopy(v, it.Value())
			m.SetMapIndex(it.Key(), v)
		}
		dst.Set(m)
	default:
		dst.Set(src)
	}
}

// Masked returns a deep copy with secrets replaced by Mask: the admin
// token, the gateway's API keys, the etcd password and client key, and the
// event-bus TLS key.
// Certificates and CA paths stay readable; token_hash is already a hash.
func (c *Config) Masked() *Config {
	m := c.Clone()
	mask := func(s *string) {
		if *s != "" {
			*s = Mask
		}
	}
	mask(&m.Admin.Token)
	if t := m.Dynamo.Discovery.Etcd.TLS; t != nil {
		mask(&t.ClientKey)
	}
	if a := m.Dynamo.Discovery.Etcd.Auth; a != nil {
		mask(&a.Password)
	}
	mask(&m.Dynamo.EventBus.TLS.Key)
	for i := range m.APIKeys {
		mask(&m.APIKeys[i].Key)
	}
	return m
}

// YAML renders the configuration as it would be written in a file. Call
// it on Masked() for anything a person or a log will see.
func (c *Config) YAML() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
