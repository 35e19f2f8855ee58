package doccheck

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the repository root, from this package's directory (where
// go test runs the tests).
const repoRoot = "../.."

// knownBroken lists the snippets, as file#n (the file's n-th go block),
// that do not compile and that the owners of this package may not fix.
// Each is still compiled, on its own, and must still fail: when one
// compiles, the test asks for its entry to be removed.
var knownBroken = map[string]string{}

// knownImports are the package names a snippet without an import block may
// use, and their import paths.
var knownImports = map[string]string{
	"context":        "context",
	"errors":         "errors",
	"fmt":            "fmt",
	"log":            "log",
	"slog":           "log/slog",
	"os":             "os",
	"strings":        "strings",
	"sync":           "sync",
	"time":           "time",
	"tls":            "crypto/tls",
	"lock":           "github.com/fairlock/fairlock/lock",
	"inspect":        "github.com/fairlock/fairlock/lock/inspect",
	"backend":        "github.com/fairlock/fairlock/backend",
	"pubsub":         "github.com/fairlock/fairlock/backend/pubsub",
	"conformance":    "github.com/fairlock/fairlock/conformance",
	"fairotel":       "github.com/fairlock/fairlock/otel",
	"rueidisbackend": "github.com/fairlock/fairlock/rueidisbackend",
	"valkeybackend":  "github.com/fairlock/fairlock/valkeybackend",
	"goredisbackend": "github.com/fairlock/fairlock/goredisbackend",
	"rueidis":        "github.com/redis/rueidis",
	"valkey":         "github.com/valkey-io/valkey-go",
	"redis":          "github.com/redis/go-redis/v9",
	"logging":        "github.com/redis/go-redis/v9/logging",
}

// snippet is one go block of a Markdown file.
type snippet struct {
	file    string // the Markdown file, relative to the repository root
	n       int    // its position among the file's go blocks, from 1
	line    int    // the line of its first code line in file
	code    string
	sig     string // the signature of a statements block; "" for none
	sigLine int    // the line of the signature's comment
}

func (s snippet) id() string { return fmt.Sprintf("%s#%d", s.file, s.n) }

var (
	fenceOpen        = regexp.MustCompile("^( *)(`{3,}|~{3,})[ \t]*([^ \t`]*)")
	signatureComment = regexp.MustCompile(`^\s*<!--\s*snippet:\s*(.*?)\s*-->\s*$`)
)

// extract returns the go blocks of src, the text of the Markdown file
// file.
func extract(file, src string) ([]snippet, error) {
	lines := strings.Split(src, "\n")
	var out []snippet
	for i := 0; i < len(lines); i++ {
		m := fenceOpen.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, marker, lang := len(m[1]), m[2], m[3]
		end := i + 1
		for ; end < len(lines); end++ {
			l := strings.TrimLeft(lines[end], " ")
			if strings.HasPrefix(l, marker) && strings.Trim(l, marker[:1]+" \t") == "" {
				break
			}
		}
		if end == len(lines) {
			return nil, fmt.Errorf("%s:%d: code block not closed", file, i+1)
		}
		if lang == "go" {
			body := make([]string, 0, end-i-1)
			for _, l := range lines[i+1 : end] {
				body = append(body, l[min(indent, len(l)-len(strings.TrimLeft(l, " "))):])
			}
			s := snippet{file: file, n: len(out) + 1, line: i + 2, code: strings.Join(body, "\n")}
			s.sig, s.sigLine = signatureBefore(lines, i)
			out = append(out, s)
		}
		i = end
	}
	return out, nil
}

// signatureBefore returns the signature in the snippet comment above line
// i (blank lines between allowed), and that comment's line number.
func signatureBefore(lines []string, i int) (string, int) {
	for j := i - 1; j >= 0; j-- {
		if strings.TrimSpace(lines[j]) == "" {
			continue
		}
		if m := signatureComment.FindStringSubmatch(lines[j]); m != nil {
			return m[1], j + 1
		}
		return "", 0
	}
	return "", 0
}

// source returns the Go file that compiles s, with //line directives that
// point at path, the Markdown file. Syntax errors come back positioned in
// path too.
func (s snippet) source(path string) (string, error) {
	at := func(line int) string { return fmt.Sprintf("//line %s:%d\n", path, line) }
	fset := token.NewFileSet()
	if s.sig == "" {
		if _, err := parser.ParseFile(fset, path, at(s.line)+s.code, parser.PackageClauseOnly); err == nil {
			src := at(s.line) + s.code
			_, err := parser.ParseFile(fset, path, src, parser.AllErrors)
			return src, err
		}
		src := "package snippet\n" + at(s.line) + s.code
		f, err := parser.ParseFile(fset, path, src, parser.AllErrors)
		if err != nil {
			return "", fmt.Errorf("%w\n(neither a file nor declarations; statements need a <!-- snippet: func(...) --> line before the block)", err)
		}
		if len(f.Imports) > 0 {
			return src, nil
		}
		return "package snippet\n" + imports(f) + at(s.line) + s.code, nil
	}
	if !strings.HasPrefix(s.sig, "func(") {
		return "", fmt.Errorf("%s:%d: snippet signature %q does not start with func(", path, s.sigLine, s.sig)
	}
	body := at(s.sigLine) + "func _" + strings.TrimPrefix(s.sig, "func") + " {\n" + at(s.line) + s.code + "\n}\n"
	f, err := parser.ParseFile(fset, path, "package snippet\n"+body, parser.AllErrors)
	if err != nil {
		return "", err
	}
	return "package snippet\n" + imports(f) + body, nil
}

// imports returns the import block for the known package names f uses
// without declaring them.
func imports(f *ast.File) string {
	unresolved := make(map[string]bool)
	for _, id := range f.Unresolved {
		unresolved[id.Name] = true
	}
	used := make(map[string]bool)
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && unresolved[id.Name] && knownImports[id.Name] != "" {
				used[id.Name] = true
			}
		}
		return true
	})
	if len(used) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nimport (\n")
	for _, name := range slices.Sorted(maps.Keys(used)) {
		fmt.Fprintf(&b, "\t%s %q\n", name, knownImports[name])
	}
	b.WriteString(")\n\n")
	return b.String()
}

// vet writes each snippet as a package of its own, in a temporary
// directory inside this package's directory (so inside the module), and
// runs one go vet over them all. root is the directory the snippets' file
// names are relative to. It returns go vet's output, and an error when a
// snippet did not parse or go vet failed.
func vet(t *testing.T, root string, snips []snippet) (string, error) {
	t.Helper()
	// "_": go's ./... patterns skip the directory, should a run leave it
	// behind.
	dir, err := os.MkdirTemp(".", "_snippets")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var pkgs, where []string
	var parseErrs []error
	for i, s := range snips {
		path, err := filepath.Abs(filepath.Join(root, s.file))
		if err != nil {
			t.Fatal(err)
		}
		src, err := s.source(path)
		if err != nil {
			parseErrs = append(parseErrs, fmt.Errorf("%s: %w", s.id(), err))
			continue
		}
		pkg := filepath.Join(dir, fmt.Sprintf("s%02d", i+1))
		if err := os.Mkdir(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "snippet.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, "./"+filepath.ToSlash(pkg))
		where = append(where, fmt.Sprintf("%s: %s (line %d)", filepath.Base(pkg), s.id(), s.line))
	}
	if len(pkgs) == 0 {
		return "", errors.Join(parseErrs...)
	}
	cmd := exec.Command("go", append([]string{"vet"}, pkgs...)...)
	// Everything the snippets import is in the module's go.mod: nothing
	// to download.
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	if err != nil {
		err = fmt.Errorf("go vet: %w\npackages: %s", err, strings.Join(where, "; "))
	}
	return string(out), errors.Join(append(parseErrs, err)...)
}

// docSnippets returns the go blocks of README.md and docs/*.md.
func docSnippets(t *testing.T) []snippet {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var all []snippet
	for _, f := range append([]string{filepath.Join(repoRoot, "README.md")}, docs...) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(repoRoot, f)
		if err != nil {
			t.Fatal(err)
		}
		snips, err := extract(filepath.ToSlash(rel), string(src))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, snips...)
	}
	return all
}

// TestDocSnippetsCompile compiles and vets every go block of README.md and
// docs/*.md (see the package documentation for how a block is wrapped).
func TestDocSnippetsCompile(t *testing.T) {
	all := docSnippets(t)
	var good, broken []snippet
	for _, s := range all {
		if _, ok := knownBroken[s.id()]; ok {
			broken = append(broken, s)
		} else {
			good = append(good, s)
		}
	}
	if len(good) == 0 {
		t.Fatal("no go blocks found in README.md and docs/*.md")
	}
	if out, err := vet(t, repoRoot, good); err != nil {
		t.Fatalf("a snippet does not compile or vet:\n%s\n%v", out, err)
	}
	for id := range knownBroken {
		if !slices.ContainsFunc(broken, func(s snippet) bool { return s.id() == id }) {
			t.Errorf("knownBroken lists %s, which is not a go block: remove it", id)
		}
	}
	for _, s := range broken {
		t.Run(s.id(), func(t *testing.T) {
			out, err := vet(t, repoRoot, []snippet{s})
			if err == nil {
				t.Fatalf("%s compiles now: remove it from knownBroken", s.id())
			}
			t.Logf("%s, line %d, does not compile (known: %s):\n%s%v", s.id(), s.line, knownBroken[s.id()], out, err)
		})
	}
}
