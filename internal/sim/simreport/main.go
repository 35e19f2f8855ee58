// Command simreport rewrites RELIABILITY.md's simulation section from the
// summaries the processes of one simulation run wrote (TestSimulate's
// -sim.summary): scripts/soak.sh --simulate --report runs it.
//
//	go run ./internal/sim/simreport -report RELIABILITY.md SUMMARY...
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fairlock/fairlock/internal/sim"
)

func main() {
	report := flag.String("report", "", "the file whose simulation section to rewrite")
	flag.Parse()
	if *report == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: simreport -report FILE SUMMARY...")
		os.Exit(2)
	}
	if err := sim.WriteReport(*report, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "simreport:", err)
		os.Exit(1)
	}
}
