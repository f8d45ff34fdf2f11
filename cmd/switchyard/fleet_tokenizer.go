package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"switchyard/fakefleet/fleet"
	"switchyard/fixtures"
	"switchyard/router/config"
	"switchyard/router/prompt"
	"switchyard/router/prompt/template"
)

// builtinTokenizerPrefix names a tokenizer the binary carries, so that a
// fleet file can use the project's test tokenizer without paths:
// `tokenizer: builtin:switchyard-bpe-4k`.
const builtinTokenizerPrefix = "builtin:"

// maxArtifactFileBytes is the size cap of a model card's artifacts.
const maxArtifactFileBytes = template.MaxConfigBytes

// builtinTokenizer is the fixture a tokenizer value names, if it names one.
func (ff *fleetFile) builtinTokenizer() (string, bool) {
	return strings.CutPrefix(ff.Tokenizer, builtinTokenizerPrefix)
}

// artifactPath resolves a path of the fleet file against its folder.
func (ff *fleetFile) artifactPath(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(ff.dir, p)
}

// validateTokenizer checks tokenizer and tokenizer_config: a built-in
// tokenizer by name, files by reading them and loading them as the fleet
// will (prompt.FromFiles), so that a fleet file that validates starts.
func (ff *fleetFile) validateTokenizer() []config.Issue {
	var errs []config.Issue
	fail := func(path, format string, args ...any) {
		errs = append(errs, config.Issue{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if ff.Tokenizer == "" {
		if ff.TokenizerConfig != "" {
			fail("tokenizer_config", "needs tokenizer: the tokenizer.json it belongs to")
		}
		return errs
	}
	if name, ok := ff.builtinTokenizer(); ok {
		if name != fixtures.TestTokenizer {
			fail("tokenizer", "the only built-in tokenizer is %s%s", builtinTokenizerPrefix, fixtures.TestTokenizer)
		}
		if ff.TokenizerConfig != "" {
			fail("tokenizer_config", "must be empty with a built-in tokenizer, which brings its own")
		}
		return errs
	}
	tok, err := readArtifactFile(ff.artifactPath(ff.Tokenizer))
	if err != nil {
		fail("tokenizer", "%v", err)
	}
	var cfg []byte
	if ff.TokenizerConfig != "" {
		if cfg, err = readArtifactFile(ff.artifactPath(ff.TokenizerConfig)); err != nil {
			fail("tokenizer_config", "%v", err)
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if _, err := prompt.FromFiles(tok, cfg); err != nil {
		field := "tokenizer"
		if isTemplateError(err) {
			field = "tokenizer_config"
		}
		// FromFiles prefixes the file kind, which the field path says already.
		fail(field, "%v", cmp.Or(errors.Unwrap(err), err))
	}
	return errs
}

// isTemplateError reports whether err came from the chat template (every
// template error wraps one of its kinds).
func isTemplateError(err error) bool {
	for _, kind := range []error{template.ErrSyntax, template.ErrTooLarge, template.ErrLimit, template.ErrDeadline,
		template.ErrRaised, template.ErrInput, template.ErrRender} {
		if errors.Is(err, kind) {
			return true
		}
	}
	return false
}

// readArtifactFile reads a regular file within the artifact cap: the
// cards name it by path, and the router reads it as a file too.
func readArtifactFile(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return readCappedFile(path, maxArtifactFileBytes)
}

// fleetArtifacts are the tokenizer files the fleet's cards name, as
// absolute paths, or nil without a tokenizer. A built-in tokenizer is
// written to a new temporary folder (tmp), which the caller removes once
// the fleet has stopped.
func (ff *fleetFile) fleetArtifacts() (a *fleet.Artifacts, tmp string, err error) {
	if ff.Tokenizer == "" {
		return nil, "", nil
	}
	if _, ok := ff.builtinTokenizer(); ok {
		if tmp, err = os.MkdirTemp("", "switchyard-fleet-tokenizer-"); err != nil {
			return nil, "", err
		}
		if a, err = writeDemoArtifacts(tmp); err != nil {
			os.RemoveAll(tmp)
			return nil, "", err
		}
		return a, tmp, nil
	}
	a = &fleet.Artifacts{TokenizerPath: ff.artifactPath(ff.Tokenizer)}
	if ff.TokenizerConfig != "" {
		a.ConfigPath = ff.artifactPath(ff.TokenizerConfig)
	}
	return a, "", nil
}

// pinnedArtifactsLine is what a router serving the fleet pins, as a line
// of its configuration.
func pinnedArtifactsLine(checksums []string) string {
	quoted := make([]string, len(checksums))
	for i, c := range checksums {
		quoted[i] = strconv.Quote(c)
	}
	return "pinned_artifacts: [" + strings.Join(quoted, ", ") + "]"
}
