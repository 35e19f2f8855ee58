// Package doccheck compiles every Go snippet of README.md and docs/*.md, so
// that a snippet cannot stop compiling unnoticed, and checks that the prose
// of README.md, docs/*.md, RULES.md, DESIGN.md and RELIABILITY.md names
// only what exists (TestDocNamesExist, below). The package has tests only.
//
// Every fenced block marked go (```go) is compiled, and vetted; a block
// that is not Go - shell commands, output - is marked otherwise (```sh,
// ```text, or nothing). A go block is one of three kinds, told apart by its
// text:
//
//   - A whole file: it starts with a package clause. It is compiled as it
//     stands.
//   - Declarations: functions, types, variables and constants, with or
//     without an import block.
//   - Statements: the body of a function. An HTML comment, which Markdown
//     does not show, on the last non-blank line before the block gives the
//     function's signature: its parameters are the variables the
//     statements use without declaring them, its results what they return.
//     A block with such a comment is always taken as statements.
//
// The comment for statements that use ctx and m and return an error:
//
//	<!-- snippet: func(ctx context.Context, m *lock.Mutex) error -->
//
// A block of declarations or statements without an import block gets the
// imports of the package names it uses, from a fixed list in the test
// (knownImports: context, errors, time and a few more standard packages,
// fairlock's packages, rueidis, valkey for valkey-go, redis for go-redis
// v9); a block with an import block must list all its imports, as a reader
// who copies it needs them.
//
// Each block becomes a package of its own in a temporary directory inside
// this one (inside the module, so the module's go.mod and go.sum resolve
// its imports and nothing is downloaded), and one go vet run checks them
// all. Errors name the Markdown file and line, through //line directives.
//
// # Names
//
// Outside fenced blocks, every name a document gives is looked up in the
// repository, parsed with go/parser (every module in it, tests included):
//
//   - pkg.Name for a fairlock package (lock.WithLease, wire.Acquire;
//     fairotel for package otel): pkg must declare Name.
//   - Type.Member for a type of the repository (Mutex.Lock, owner.withGate),
//     and m.X, hold.X, c.X and locks.X for Mutex, Hold and Client: a method
//     or field of that name.
//   - WithX anywhere, and a bare identifier in backticks (`ErrLockLost`,
//     `TestShape`): a name of the repository, a string of its code (a
//     subtest's name, as X3_LeaseExpiryWakesHead), or one of another
//     library's names listed in the test (foreignNames, each with its
//     owner).
//   - A test with subtests, `TestX/a/b`: TestX exists, and b is in a string
//     of the code.
//   - Link targets, relative to the document; backticked paths that start
//     at an entry of the root or name a file (lock/mutex.go, a bare
//     acquire.lua anywhere in the tree); fairlock's import paths.
//
// Go blocks are left to the compiler; CHANGELOG.md names what was and is
// not read.
package doccheck
