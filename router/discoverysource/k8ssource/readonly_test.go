package k8ssource

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// writeVerbs are the client-go methods through which a client changes the
// cluster. The read-only contract is checked on the source so that a
// future edit cannot slip a write in unnoticed; the RBAC test checks the
// same at run time.
var writeVerbs = map[string]bool{
	"Create": true, "Update": true, "UpdateStatus": true, "Patch": true, "Apply": true,
	"ApplyStatus": true, "Delete": true, "DeleteCollection": true, "Evict": true,
	"EvictV1": true, "EvictV1beta1": true, "Bind": true, "UpdateEphemeralContainers": true,
	"UpdateResize": true,
}

func writeCalls(fset *token.FileSet, file *ast.File) []string {
	var out []string
	ast.Inspect(file, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && writeVerbs[sel.Sel.Name] && !toSink(sel) {
			out = append(out, fset.Position(sel.Sel.Pos()).String()+": "+sel.Sel.Name)
		}
		return true
	})
	return out
}

// toSink tells the host's Sink.Apply (handing events to the core) from a
// server-side apply.
func toSink(sel *ast.SelectorExpr) bool {
	recv, ok := sel.X.(*ast.SelectorExpr)
	return ok && recv.Sel.Name == "sink"
}

func TestSourceIsReadOnly(t *testing.T) {
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	var bad []string
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		bad = append(bad, writeCalls(fset, f)...)
		checked++
	}
	if checked < 5 {
		t.Fatalf("checked only %d files; is the test running in the package directory?", checked)
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("write API used in the read-only Pod source: %s", b)
	}
}

// TestReadOnlyCheckerCatchesWrites proves the checker is not vacuous.
func TestReadOnlyCheckerCatchesWrites(t *testing.T) {
	const src = `package x
func f(pods PodInterface) {
	pods.Create(ctx, p, opts)
	pods.UpdateStatus(ctx, p, opts)
	pods.Delete(ctx, "p", opts)
	pods.Patch(ctx, "p", typ, data, opts)
	pods.Apply(ctx, cfg, opts)
	pods.List(ctx, opts)
	pods.Watch(ctx, opts)
	w.sink.Apply(batch)
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, v := range writeCalls(fset, f) {
		got[v[strings.LastIndex(v, " ")+1:]] = true
	}
	for _, name := range []string{"Create", "UpdateStatus", "Delete", "Patch", "Apply"} {
		if !got[name] {
			t.Errorf("checker missed %s", name)
		}
	}
	if got["List"] || got["Watch"] {
		t.Errorf("checker flagged a read: %v", got)
	}
	if n := len(writeCalls(fset, f)); n != 5 {
		t.Errorf("%d write calls found, want 5 (the sink's Apply is not one)", n)
	}
}
