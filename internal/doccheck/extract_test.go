package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// page is a Markdown file with one block of each kind, a block that is not
// Go, and a go block inside a list item.
const page = "# A page\n" + // 1
	"\n" +
	"```go\n" + // 3
	"package main\n" +
	"\n" +
	"func main() {}\n" +
	"```\n" +
	"\n" +
	"```sh\n" + // 9
	"go run .\n" +
	"```\n" +
	"\n" +
	"<!-- snippet: func(ctx context.Context, m *lock.Mutex) error -->\n" + // 13
	"\n" +
	"```go\n" + // 15
	"_, err := m.Lock(ctx)\n" +
	"return err\n" +
	"```\n" +
	"\n" +
	"- an item:\n" + // 20
	"  ```go\n" +
	"  func hold(ctx context.Context, m *lock.Mutex) (int64, error) {\n" +
	"  \th, err := m.Lock(ctx)\n" +
	"  \treturn h.Token(), err\n" +
	"  }\n" +
	"  ```\n"

func TestExtractFindsGoBlocks(t *testing.T) {
	snips, err := extract("page.md", page)
	if err != nil {
		t.Fatal(err)
	}
	want := []snippet{
		{file: "page.md", n: 1, line: 4, code: "package main\n\nfunc main() {}"},
		{file: "page.md", n: 2, line: 16, code: "_, err := m.Lock(ctx)\nreturn err",
			sig: "func(ctx context.Context, m *lock.Mutex) error", sigLine: 13},
		{file: "page.md", n: 3, line: 22, code: "func hold(ctx context.Context, m *lock.Mutex) (int64, error) {\n\th, err := m.Lock(ctx)\n\treturn h.Token(), err\n}"},
	}
	if len(snips) != len(want) {
		t.Fatalf("got %d blocks %+v, want %d", len(snips), snips, len(want))
	}
	for i := range want {
		if snips[i] != want[i] {
			t.Errorf("block %d:\n got %+v\nwant %+v", i+1, snips[i], want[i])
		}
	}
}

func TestExtractRejectsAnUnclosedBlock(t *testing.T) {
	if _, err := extract("page.md", "```go\nfunc f() {}\n"); err == nil || !strings.Contains(err.Error(), "page.md:1") {
		t.Errorf("err = %v, want one naming page.md:1", err)
	}
}

func TestSourceNeedsASignatureForStatements(t *testing.T) {
	s := snippet{file: "page.md", n: 1, line: 4, code: "x := 1\n_ = x"}
	_, err := s.source("/docs/page.md")
	if err == nil || !strings.Contains(err.Error(), "<!-- snippet: func(...) -->") {
		t.Errorf("err = %v, want one asking for a snippet signature", err)
	}
}

// TestBrokenSnippetIsReported runs the check on a page with the three
// kinds and a block that does not compile: go vet fails, naming the page
// and the broken line.
func TestBrokenSnippetIsReported(t *testing.T) {
	root := t.TempDir()
	broken := page + "\n" + // 27
		"<!-- snippet: func(m *lock.Mutex) -->\n" + // 28
		"```go\n" +
		"m.Lok()\n" + // 30
		"```\n"
	if err := os.WriteFile(filepath.Join(root, "page.md"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	snips, err := extract("page.md", broken)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := vet(t, root, snips[:3]); err != nil {
		t.Fatalf("the good blocks fail:\n%s\n%v", out, err)
	}
	out, err := vet(t, root, snips)
	if err == nil {
		t.Fatalf("a block calling m.Lok passed:\n%s", out)
	}
	if !strings.Contains(out, "page.md:30") || !strings.Contains(out, "Lok") {
		t.Errorf("go vet's output does not name page.md:30 and Lok:\n%s", out)
	}
	t.Logf("go vet reports:\n%s%v", out, err)
}
