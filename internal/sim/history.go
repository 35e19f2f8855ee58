package sim

import (
	"fmt"
	"path/filepath"

	"github.com/fairlock/fairlock/internal/soak"
)

// recorder writes one simulated history in the soak's own terms, so the
// soak's checker judges it as it judges a real run.
type recorder struct {
	h *soak.History
}

func newRecorder(seed uint64) *recorder {
	return &recorder{h: soak.NewHistory(seed)}
}

// ended records that hd's Done closed now with err.
func (r *recorder) ended(hd *soak.Hold, err error) { hd.End(r.h.Now(), err) }

// complete saves the history in dir, as the soak saves its own (for
// TestRecheck), and returns it.
func (r *recorder) complete(dir string, b soak.Bounds) (*soak.History, error) {
	path := filepath.Join(dir, fmt.Sprintf("history-%d.json.gz", r.h.Seed))
	if err := r.h.Save(path, b); err != nil {
		return nil, err
	}
	return r.h, nil
}
