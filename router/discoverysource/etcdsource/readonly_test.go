package etcdsource

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// forbidden are the names through which an etcd client writes, deletes,
// compacts or leases. The read-only contract is checked on the source so a
// future edit cannot slip a write in unnoticed: any selector or identifier
// with one of these names in a non-test file fails the build's tests.
var forbidden = map[string]bool{
	"Put": true, "Delete": true, "Txn": true, "Compact": true,
	"Grant": true, "Revoke": true, "KeepAlive": true, "KeepAliveOnce": true,
	"OpPut": true, "OpDelete": true, "OpTxn": true, "OpCompact": true,
	"NewKV": true, "NewKVFromKVClient": true, "NewLease": true, "NewLeaseFromLeaseClient": true,
	// The client's lease, cluster, maintenance and auth sub-APIs have no
	// use in a read-only observer.
	"Lease": true, "Cluster": true, "Maintenance": true, "Auth": true,
}

// readOnlyViolations lists forbidden names used in one Go source file.
func readOnlyViolations(fset *token.FileSet, file *ast.File) []string {
	var out []string
	ast.Inspect(file, func(n ast.Node) bool {
		var name *ast.Ident
		switch x := n.(type) {
		case *ast.SelectorExpr:
			name = x.Sel
		case *ast.CallExpr:
			if id, ok := x.Fun.(*ast.Ident); ok {
				name = id
			}
		}
		if name != nil && forbidden[name.Name] {
			out = append(out, fset.Position(name.Pos()).String()+": "+name.Name)
		}
		return true
	})
	return out
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
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, p, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		bad = append(bad, readOnlyViolations(fset, f)...)
		checked++
	}
	if checked < 5 {
		t.Fatalf("checked only %d files; is the test running in the package directory?", checked)
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("write/lease API used in read-only discovery source: %s", b)
	}
}

// TestReadOnlyCheckerCatchesWrites proves the checker is not vacuous.
func TestReadOnlyCheckerCatchesWrites(t *testing.T) {
	const src = `package x
func f(c *clientv3.Client) {
	c.Put(ctx, "k", "v")
	c.KV.Delete(ctx, "k")
	c.Txn(ctx).Commit()
	lease := c.Lease
	_ = clientv3.NewKV(c)
	clientv3.NewLease(c).Grant(ctx, 10)
	c.KeepAlive(ctx, 1)
	c.Compact(ctx, 5)
	c.Get(ctx, "k")
	c.Watch(ctx, "k")
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, v := range readOnlyViolations(fset, f) {
		got[v[strings.LastIndex(v, " ")+1:]] = true
	}
	for _, name := range []string{"Put", "Delete", "Txn", "Lease", "NewKV", "NewLease", "Grant", "KeepAlive", "Compact"} {
		if !got[name] {
			t.Errorf("checker missed %s", name)
		}
	}
	if got["Get"] || got["Watch"] || got["KV"] {
		t.Errorf("checker flagged a read: %v", got)
	}
}
