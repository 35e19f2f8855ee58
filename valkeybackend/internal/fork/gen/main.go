// Command gen writes valkeybackend.go from rueidisbackend.go. Run it with
// go generate ./valkeybackend (it runs in the valkeybackend directory).
package main

import (
	"log"
	"os"

	"github.com/fairlock/fairlock/valkeybackend/internal/fork"
)

func main() {
	src, err := os.ReadFile("../rueidisbackend/rueidisbackend.go")
	if err != nil {
		log.Fatal(err)
	}
	out, err := fork.Valkey(src)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("valkeybackend.go", out, 0o644); err != nil {
		log.Fatal(err)
	}
}
