//go:build !unix

package redistest

import (
	"errors"
	"os"
	"os/exec"
)

var errNoSignals = errors.New("not supported on this platform")

func setProcAttr(*exec.Cmd) {}

// terminate stops the server; without POSIX signals this is a kill.
func (p *process) terminate() error { return p.forceKill() }

// forceKill kills the server.
func (p *process) forceKill() error {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

func (p *process) pause() error  { return errNoSignals }
func (p *process) resume() error { return errNoSignals }
