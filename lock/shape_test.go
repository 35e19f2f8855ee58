package lock

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// The shape issue 37 set for the lock package and its sub-packages, so
// that it cannot drift back: no non-test file over maxFileLines, no
// function over maxFuncLines, and Client with at most maxClientMethods
// methods (its parts - owner registry, hold index, local wake-ups - are
// types of their own). Without a server.
const (
	maxFileLines     = 450
	maxFuncLines     = 50
	maxClientMethods = 20
)

func TestShape(t *testing.T) {
	fset := token.NewFileSet()
	clientMethods := 0
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
			t.Errorf("%s: %d lines, more than %d", path, n, maxFileLines)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: func %s: %d lines, more than %d", path, fn.Name.Name, n, maxFuncLines)
			}
			if filepath.Dir(path) == "." && receiver(fn) == "Client" {
				clientMethods++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 20 || clientMethods == 0 {
		t.Fatalf("read %d files and %d Client methods: not the lock package", files, clientMethods)
	}
	if clientMethods > maxClientMethods {
		t.Errorf("Client has %d methods, more than %d", clientMethods, maxClientMethods)
	}
	t.Logf("%d files, Client with %d methods", files, clientMethods)
}

// receiver names the type fn is a method of ("" for a function).
func receiver(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return ""
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
