package main

import (
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"switchyard/internal/traces"
	"switchyard/sweep/job"
)

// inputFlags are the flags that name a file a cell reads; large ones are workload data, read
// from --inputs-claim when it is given.
var inputFlags = []struct {
	name  string
	large bool
}{{"trace", true}, {"recording", true}, {"scenario", false}, {"fleet", false}, {"profile", false}, {"config", false}}

// maxScenarioBytes caps a scenario or fleet file read for the files it names.
const maxScenarioBytes = 4 << 20

// sweepInputs are the files the plan's cells read, as the Job must mount them: every input
// flag's file (each swept value's too), and the trace and engine profiles a scenario or fleet
// file names, at the paths the cells resolve them to.
func (p *sweepPlan) sweepInputs(fl *pflag.FlagSet) ([]job.Input, error) {
	var out []job.Input
	for _, f := range inputFlags {
		if fl.Lookup(f.name) == nil {
			continue
		}
		var values []string
		if fl.Changed(f.name) {
			values = append(values, fl.Lookup(f.name).Value.String())
		}
		for _, d := range p.grid.Dimensions {
			if d.Name == f.name {
				values = append(values, d.Values...)
			}
		}
		for _, v := range values {
			what := "--" + f.name
			in := job.Input{Path: v, Large: f.large, What: what, Source: localInput(f.name, v)}
			out = append(out, in)
			if f.name != "scenario" && f.name != "fleet" {
				continue
			}
			if in.Source == "" {
				return nil, fmt.Errorf("%s %s: not found here: the Job carries it to the cells", what, v)
			}
			refs, err := scenarioInputs(v, in.Source)
			if err != nil {
				return nil, err
			}
			out = append(out, refs...)
		}
	}
	return out, nil
}

// localInput is where a flag's file is here, or "" when it is not: a trace given by name
// alone is also looked for in the trace directory, as the command does.
func localInput(flag, v string) string {
	if fi, err := os.Stat(v); err == nil && fi.Mode().IsRegular() {
		return v
	}
	if flag == "trace" && !filepath.IsAbs(v) {
		if p, err := traces.Find(v); err == nil {
			return p
		}
	}
	return ""
}

// scenarioInputs are the files a scenario or fleet file names: its trace and its groups'
// engine profiles. A relative one is resolved from the file's folder, in the Pod as here.
func scenarioInputs(arg, source string) ([]job.Input, error) {
	f, err := os.Open(source)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxScenarioBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", arg, err)
	}
	if len(raw) > maxScenarioBytes {
		return nil, fmt.Errorf("%s: larger than %d MiB, not a scenario file", arg, maxScenarioBytes>>20)
	}
	var refs struct {
		Workload struct {
			Trace struct {
				Path string `yaml:"path"`
			} `yaml:"trace"`
		} `yaml:"workload"`
		Fleet []struct {
			Engine struct {
				Profile string `yaml:"profile"`
			} `yaml:"engine"`
		} `yaml:"fleet"`
	}
	if err := yaml.Unmarshal(raw, &refs); err != nil {
		return nil, fmt.Errorf("%s: %w", arg, err)
	}
	var out []job.Input
	resolve := func(ref, field string, large bool) {
		in := job.Input{Path: ref, Large: large, What: field + " of " + arg}
		beside := ref
		if !filepath.IsAbs(ref) {
			in.Path = path.Join(path.Dir(filepath.ToSlash(arg)), ref)
			beside = filepath.Join(filepath.Dir(source), ref)
		}
		switch {
		case fileExists(beside):
			in.Source = beside
		case large && !filepath.IsAbs(ref):
			if p, err := traces.Find(ref); err == nil {
				in.Source = p
			}
		case fileExists(ref): // an engine profile is also taken from the working folder
			in.Source = ref
		}
		out = append(out, in)
	}
	if p := refs.Workload.Trace.Path; p != "" {
		resolve(p, "workload.trace.path", true)
	}
	for i, g := range refs.Fleet {
		if p := g.Engine.Profile; p != "" {
			resolve(p, fmt.Sprintf("fleet[%d].engine.profile", i), false)
		}
	}
	return out, nil
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
