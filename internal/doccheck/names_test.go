package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The check that the prose names only what exists: every option, type,
// method, function, test and file a document names, outside its go blocks
// (which TestDocSnippetsCompile compiles), must be in the repository.

// namedDocs are the documents whose names are checked, from the
// repository root ("docs/*.md": each page there). CHANGELOG.md is not
// among them: it names what was, too.
var namedDocs = []string{"README.md", "docs/*.md", "RULES.md", "DESIGN.md", "RELIABILITY.md"}

// modulePath is the module's import path: a backticked import path in it
// must be one of the repository's directories.
const modulePath = "github.com/fairlock/fairlock"

// packageAliases are the names documents give fairlock's packages besides
// their own: the otel package is imported as fairotel, beside
// OpenTelemetry's otel.
var packageAliases = map[string]string{"fairotel": "otel"}

// ambiguousPackages are package names shared with another library the
// documents name: "otel" is OpenTelemetry's too, "redis" go-redis'.
var ambiguousPackages = map[string]bool{"otel": true, "main": true}

// receiverVars are the variable names documents use for fairlock's types,
// as in `m.Lock(ctx)` or `hold.Token()`.
var receiverVars = map[string]string{"m": "Mutex", "hold": "Hold", "c": "Client", "locks": "Client"}

// foreignNames are names, written bare in backticks, of other libraries:
// what the comparison and the Java pages name. Each says whose it is.
var foreignNames = map[string]string{
	"RFairLock":         "Redisson",
	"RFencedLock":       "Redisson",
	"RetryStrategy":     "bsm/redislock",
	"ErrNotObtained":    "bsm/redislock",
	"ErrFailed":         "redsync",
	"ErrNotLocked":      "rueidislock",
	"KeyValidity":       "rueidislock",
	"WithContext":       "rueidislock",
	"TryWithContext":    "rueidislock",
	"LockContext":       "redsync",
	"TryLockContext":    "redsync",
	"Obtain":            "bsm/redislock",
	"Refresh":           "bsm/redislock",
	"Release":           "bsm/redislock",
	"ErrLocked":         "etcd concurrency",
	"RedissonFairLock":  "Redisson",
	"Lua":               "the scripting language",
	"ForceSingleClient": "rueidis' ClientOption",
	"MaxFlushDelay":     "rueidis' ClientOption",
	"MaxRetries":        "go-redis' options",
	"DialerRetries":     "go-redis' options",
	"PoolSize":          "go-redis' options",
	"Username":          "go-redis' options",
	"Password":          "go-redis' options",
	"ServerName":        "crypto/tls' Config",
}

// fileExt matches a file name's extension that a document may name.
var fileExt = regexp.MustCompile(`\.(go|lua|md|sh|json|svg|mod|sum|yml|yaml|txt|java)$`)

// index is what the repository declares: its Go names and its files.
type index struct {
	root     string
	pkgs     map[string]map[string]bool // package name -> its top-level names (non-test files)
	members  map[string]map[string]bool // type name -> its methods and fields (non-test files)
	names    map[string]bool            // every top-level name, method and field, tests included
	strs     strings.Builder            // every string literal, for subtest names
	literals map[string]bool            // the same, each whole
	basename map[string]bool            // every file's name
	checked  int                        // how many names check looked up
	foreign  map[string]bool            // the foreignNames the documents used
}

// buildIndex parses every Go file under root (every module in the
// repository) and lists every file.
func buildIndex(root string) (*index, error) {
	ix := &index{root: root, pkgs: map[string]map[string]bool{}, members: map[string]map[string]bool{},
		names: map[string]bool{}, literals: map[string]bool{}, basename: map[string]bool{},
		foreign: map[string]bool{}}
	fset := token.NewFileSet()
	// This package's own strings name what does not exist, on purpose.
	self, err := filepath.Abs(".")
	if err != nil {
		return nil, err
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			abs, err := filepath.Abs(path)
			if err != nil {
				return err
			}
			if abs == self || path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		ix.basename[name] = true
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ix.add(f, strings.HasSuffix(name, "_test.go"))
		return nil
	})
	return ix, err
}

// add records f's declarations: a test file's only in names.
func (ix *index) add(f *ast.File, test bool) {
	pkg := f.Name.Name
	top := func(name string) {
		ix.names[name] = true
		if !test {
			set(ix.pkgs, pkg)[name] = true
		}
	}
	member := func(typ, name string) {
		ix.names[name] = true
		if !test {
			set(ix.members, typ)[name] = true
		}
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv != nil && len(d.Recv.List) > 0 {
				member(typeName(d.Recv.List[0].Type), d.Name.Name)
			} else {
				top(d.Name.Name)
			}
		case *ast.GenDecl:
			ix.addGen(d, top, member)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				ix.strs.WriteString(s + "\n")
				ix.literals[s] = true
			}
		}
		return true
	})
}

// addGen records a type, variable or constant declaration, and a type's
// fields or interface methods.
func (ix *index) addGen(d *ast.GenDecl, top func(string), member func(typ, name string)) {
	for _, spec := range d.Specs {
		switch s := spec.(type) {
		case *ast.TypeSpec:
			top(s.Name.Name)
			var fields *ast.FieldList
			switch t := s.Type.(type) {
			case *ast.StructType:
				fields = t.Fields
			case *ast.InterfaceType:
				fields = t.Methods
			}
			if fields == nil {
				continue
			}
			for _, fl := range fields.List {
				for _, n := range fl.Names {
					member(s.Name.Name, n.Name)
				}
				if len(fl.Names) == 0 { // embedded
					member(s.Name.Name, typeName(fl.Type))
				}
			}
		case *ast.ValueSpec:
			for _, n := range s.Names {
				top(n.Name)
			}
		}
	}
}

// typeName is the name of a receiver or embedded type: T for T, *T, T[P],
// pkg.T.
func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return typeName(t.X)
	case *ast.IndexExpr:
		return typeName(t.X)
	case *ast.IndexListExpr:
		return typeName(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.Ident:
		return t.Name
	}
	return ""
}

func set(m map[string]map[string]bool, k string) map[string]bool {
	if m[k] == nil {
		m[k] = map[string]bool{}
	}
	return m[k]
}

// finding is one name a document gives that the repository does not have.
type finding struct {
	file string
	line int
	what string
}

func (f finding) String() string { return fmt.Sprintf("%s:%d: %s", f.file, f.line, f.what) }

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan   = regexp.MustCompile("`([^`]+)`")
	selector   = regexp.MustCompile(`(?:^|[^\w./-])([A-Za-z_]\w*)\.([A-Za-z_]\w*)`)
	option     = regexp.MustCompile(`(?:^|[^\w.])(With[A-Z]\w*)`)
	identifier = regexp.MustCompile(`^([A-Z]\w*[a-z]\w*)(?:\(\))?$`)
	pathLike   = regexp.MustCompile(`^([\w.-]+(?:/[\w.-]+)*/?)(?::\d+(?:-\d+)?)?$`)
)

// check returns what the Markdown text src, the document file (relative
// to the root), names that does not exist. Go blocks and other fenced
// blocks are skipped.
func (ix *index) check(file, src string) []finding {
	var out []finding
	fence := ""
	for i, line := range strings.Split(src, "\n") {
		if m := fenceOpen.FindStringSubmatch(line); m != nil {
			switch {
			case fence == "":
				fence = m[2]
				continue
			case strings.HasPrefix(strings.TrimSpace(line), fence):
				fence = ""
				continue
			}
		}
		if fence != "" {
			continue
		}
		for _, what := range ix.checkLine(file, line) {
			out = append(out, finding{file: file, line: i + 1, what: what})
		}
	}
	return out
}

// checkLine returns what one line of prose names that does not exist.
func (ix *index) checkLine(file, line string) []string {
	var out []string
	for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
		if what := ix.checkLink(file, m[1]); what != "" {
			out = append(out, what)
		}
	}
	prose := mdLink.ReplaceAllString(line, "]()") // the targets are checked as files
	for _, m := range codeSpan.FindAllStringSubmatch(prose, -1) {
		if what := ix.checkSpan(m[1]); what != "" {
			out = append(out, what)
		}
	}
	for _, m := range selector.FindAllStringSubmatch(prose, -1) {
		if what := ix.checkSelector(m[1], m[2]); what != "" {
			out = append(out, what)
		}
	}
	for _, m := range option.FindAllStringSubmatch(prose, -1) {
		if !ix.names[m[1]] && !ix.isForeign(m[1]) {
			out = append(out, fmt.Sprintf("option %s: no such name in the repository", m[1]))
		}
	}
	return out
}

// checkLink checks a link target: a relative file or directory must
// exist, from the linking document's directory.
func (ix *index) checkLink(file, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, _, _ := strings.Cut(target, "#")
	ix.checked++
	if _, err := os.Stat(filepath.Join(ix.root, filepath.Dir(file), path)); err != nil {
		return fmt.Sprintf("link to %s: no such file", target)
	}
	return ""
}

// checkSpan checks one backticked span that is a path, a test name or a
// bare identifier.
func (ix *index) checkSpan(span string) string {
	if id := identifier.FindStringSubmatch(span); id != nil {
		// A subtest's name (a rule's case, X3_LeaseExpiryWakesHead) is a
		// string in the code.
		ix.checked++
		if !ix.names[id[1]] && !ix.literals[id[1]] && ix.isForeign(id[1]) {
			return ""
		}
		if !ix.names[id[1]] && !ix.literals[id[1]] {
			return fmt.Sprintf("`%s`: no such name in the repository", span)
		}
		return ""
	}
	if strings.HasPrefix(span, "Test") && strings.Contains(span, "/") && !strings.ContainsAny(span, "()|*^$[]") {
		return ix.checkTest(span)
	}
	m := pathLike.FindStringSubmatch(span)
	if m == nil {
		return ""
	}
	return ix.checkPath(strings.TrimSuffix(m[1], "/"))
}

// checkTest checks a test's name with subtests: the test function must
// exist, and its last subtest's name be in a string of the code.
func (ix *index) checkTest(span string) string {
	parts := strings.Split(span, "/")
	if !ix.names[parts[0]] {
		return fmt.Sprintf("test %s: no such test function", parts[0])
	}
	last := parts[len(parts)-1]
	if last != "" && !strings.Contains(ix.strs.String(), last) && !strings.Contains(ix.strs.String(), strings.ReplaceAll(last, "_", " ")) {
		return fmt.Sprintf("test %s: no subtest named %s in the code", span, last)
	}
	return ""
}

// checkPath checks a backticked path: a repository path, the module's
// import path of a directory, or a file's bare name. Paths of other
// modules (a domain first) and of the system (absolute) are not checked.
func (ix *index) checkPath(p string) string {
	ix.checked++
	switch {
	case p == modulePath || strings.HasPrefix(p, modulePath+"/"):
		rel := strings.TrimPrefix(strings.TrimPrefix(p, modulePath), "/")
		if _, err := os.Stat(filepath.Join(ix.root, rel)); err != nil {
			return fmt.Sprintf("import path %s: no such directory", p)
		}
	case strings.Contains(p, "/"):
		// A repository path starts at one of the root's entries, or names
		// a file; crypto/x509 or x/sys (standard and other modules'
		// packages) do neither.
		first, _, _ := strings.Cut(p, "/")
		if _, err := os.Stat(filepath.Join(ix.root, first)); err != nil && !fileExt.MatchString(p) {
			return ""
		}
		if _, err := os.Stat(filepath.Join(ix.root, p)); err != nil {
			return fmt.Sprintf("path %s: no such file or directory", p)
		}
	case fileExt.MatchString(p):
		if !ix.basename[p] {
			return fmt.Sprintf("file %s: no such file in the repository", p)
		}
	}
	return ""
}

// checkSelector checks x.y: a fairlock package's name, a type's method or
// field, or a method on a conventional variable (`m.Lock`).
func (ix *index) checkSelector(x, y string) string {
	if fileExt.MatchString("." + y) {
		return "" // a file name, checked as a path when backticked
	}
	pkg := x
	if alias, ok := packageAliases[x]; ok {
		pkg = alias
	}
	if names, ok := ix.pkgs[pkg]; ok && !ambiguousPackages[pkg] && isExported(y) {
		ix.checked++
		if !names[y] {
			return fmt.Sprintf("%s.%s: package %s has no %s", x, y, pkg, y)
		}
		return ""
	}
	typ := x
	if t, ok := receiverVars[x]; ok {
		if !isExported(y) {
			return ""
		}
		typ = t
	}
	if members, ok := ix.members[typ]; ok && (isExported(y) || !isExported(typ)) {
		ix.checked++
		if !members[y] {
			return fmt.Sprintf("%s.%s: type %s has no method or field %s", x, y, typ, y)
		}
	}
	return ""
}

// isForeign reports whether name is another library's, and notes its use.
func (ix *index) isForeign(name string) bool {
	if foreignNames[name] == "" {
		return false
	}
	ix.foreign[name] = true
	return true
}

func isExported(name string) bool { return name != "" && name[0] >= 'A' && name[0] <= 'Z' }

// checkDocs returns the findings of every document in namedDocs.
func checkDocs(t *testing.T, ix *index) []finding {
	t.Helper()
	var out []finding
	for _, pattern := range namedDocs {
		files, err := filepath.Glob(filepath.Join(ix.root, pattern))
		if err != nil || len(files) == 0 {
			t.Fatalf("no document matches %s (%v)", pattern, err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rel, err := filepath.Rel(ix.root, f)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ix.check(filepath.ToSlash(rel), string(src))...)
		}
	}
	return out
}

// TestDocNamesExist fails when README.md, docs/, RULES.md, DESIGN.md or
// RELIABILITY.md names an option, a type's method or field, a package's
// name, a test or a file that the repository does not have.
func TestDocNamesExist(t *testing.T) {
	ix, err := buildIndex(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if !ix.members["Mutex"]["Lock"] || !ix.pkgs["lock"]["WithLease"] {
		t.Fatalf("the index has no Mutex.Lock or lock.WithLease: not the repository at %s", repoRoot)
	}
	for _, f := range checkDocs(t, ix) {
		t.Error(f)
	}
	// A check that looked nothing up would pass whatever the documents
	// say.
	if ix.checked < 500 {
		t.Errorf("only %d names looked up in the documents: is the check still reading them?", ix.checked)
	}
	t.Logf("%d names, paths and links looked up", ix.checked)
	// The list of other libraries' names must not hide the repository's
	// own, nor outlive the documents' use of them.
	for name, whose := range foreignNames {
		if ix.names[name] || ix.literals[name] {
			t.Errorf("foreignNames lists %s (%s), a name of this repository: remove it", name, whose)
		} else if !ix.foreign[name] {
			t.Errorf("foreignNames lists %s (%s), which no document names now: remove it", name, whose)
		}
	}
}

// badPage names, on lines 3 to 12, one thing of each kind that does not
// exist, and around them things that do; a go block's names are left to
// the compiler.
const badPage = "# A page\n" + // 1
	"Set `lock.WithLease`, call `Mutex.Lock` and `m.Unlock(ctx)`, see [rules](RULES.md), `lock/mutex.go`, `acquire.lua`, `ErrLockLost`.\n" + // 2
	"Set `lock.WithNothing` first.\n" + // 3
	"Then `Mutex.Lok` the lock.\n" + // 4
	"Or `m.Lokk(ctx)`.\n" + // 5
	"Read [the page](docs/nope.md).\n" + // 6
	"Its code is in `lock/nope.go`.\n" + // 7
	"And in `nope_script.lua`.\n" + // 8
	"It returns `ErrNoSuchThing`.\n" + // 9
	"Checked by `TestConformance/rules/X99_NoSuchRule`.\n" + // 10
	"Import `github.com/fairlock/fairlock/nope`.\n" + // 11
	"Pass WithNothingElse(3) to it.\n" + // 12
	"Checked by `TestConformance/rules/X16_ForceUnlockedOrDeletedHolderIsToldAtOnce`, `hold.Token()`, `github.com/fairlock/fairlock/lock`, [how](docs/how-it-works.md#top).\n" + // 13
	"```go\n" +
	"_ = lock.WithNothing // compiled, not read here\n" +
	"```\n"

// TestNamesCheckFindsPlantedBadNames runs the check on badPage: each
// name that does not exist is reported on its line, and nothing else.
func TestNamesCheckFindsPlantedBadNames(t *testing.T) {
	ix, err := buildIndex(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]string{
		3:  {"lock.WithNothing"},
		4:  {"Mutex.Lok"},
		5:  {"m.Lokk"},
		6:  {"docs/nope.md"},
		7:  {"lock/nope.go"},
		8:  {"nope_script.lua"},
		9:  {"ErrNoSuchThing"},
		10: {"X99_NoSuchRule"},
		11: {"github.com/fairlock/fairlock/nope"},
		12: {"option WithNothingElse"},
	}
	got := map[int][]string{}
	for _, f := range ix.check("page.md", badPage) {
		got[f.line] = append(got[f.line], f.what)
		t.Log(f)
	}
	for line, names := range want {
		if len(got[line]) != len(names) {
			t.Errorf("line %d: got %q, want one finding for each of %q", line, got[line], names)
			continue
		}
		for i, name := range names {
			if !strings.Contains(got[line][i], name) {
				t.Errorf("line %d: finding %q does not name %s", line, got[line][i], name)
			}
		}
	}
	for line, what := range got {
		if want[line] == nil {
			t.Errorf("line %d: %q reported, but it names only what exists", line, what)
		}
	}
}
