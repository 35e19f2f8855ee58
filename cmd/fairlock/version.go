package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// buildVersion is what the binary knows about its own build
// (runtime/debug.ReadBuildInfo).
type buildVersion struct {
	module   string // the main module's version: "v1.2.3", or "(devel)" for a build from a checkout
	revision string // VCS commit, "" when not recorded (go build -buildvcs=false, go run)
	time     string // VCS commit time
	modified bool   // the work tree had changes
	goVer    string
	clients  []string // "path version" of the client libraries linked in
}

// clientModules are the client libraries whose versions version prints.
var clientModules = []string{"github.com/redis/rueidis", "github.com/valkey-io/valkey-go", "github.com/redis/go-redis/v9"}

func version() buildVersion {
	v := buildVersion{module: "(unknown)", goVer: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if info.Main.Version != "" {
		v.module = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.revision = s.Value
		case "vcs.time":
			v.time = s.Value
		case "vcs.modified":
			v.modified = s.Value == "true"
		}
	}
	for _, d := range info.Deps {
		for _, m := range clientModules {
			if d.Path == m {
				v.clients = append(v.clients, d.Path+" "+d.Version)
			}
		}
	}
	return v
}

// short is the one line of --version: "v1.2.3, commit 0123abc, go1.26.0".
func (v buildVersion) short() string {
	details := []string{v.module}
	if v.revision != "" {
		rev := v.revision[:min(len(v.revision), 12)]
		if v.modified {
			rev += ", modified"
		}
		details = append(details, "commit "+rev)
	}
	details = append(details, v.goVer)
	return strings.Join(details, ", ")
}

// print prints the version in full.
func (v buildVersion) print(w io.Writer) {
	fmt.Fprintf(w, "fairlock %s\n", v.module)
	if v.revision != "" {
		modified := ""
		if v.modified {
			modified = " (modified)"
		}
		fmt.Fprintf(w, "  commit   %s%s %s\n", v.revision, modified, v.time)
	}
	fmt.Fprintf(w, "  go       %s %s/%s\n", v.goVer, runtime.GOOS, runtime.GOARCH)
	for _, c := range v.clients {
		fmt.Fprintf(w, "  client   %s\n", c)
	}
}

func versionCommand(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version, commit and client library versions",
		Long: `
Prints the version of fairlock (from the module version go install recorded, "(devel)" for
a build from a checkout), the commit when the build recorded it, the Go version, and the
versions of the client libraries linked in. --version prints the first line only.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			version().print(e.stdout)
			return nil
		},
	}
}
