//go:build unix

package redistest

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// Servers run in their own process group, so that signals reach any child
// redis-server forked (RDB/AOF rewrite, diskless replication), and a test
// runner's terminal signals do not hit them directly.

func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = sysProcAttr()
}

// signalGroup sends sig to the process group led by p, falling back to the
// process itself. It is a no-op once the process has been reaped.
func (p *process) signalGroup(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	err := syscall.Kill(-p.cmd.Process.Pid, sig)
	if err == nil || errors.Is(err, syscall.ESRCH) {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// terminate asks the server to shut down (SIGTERM). The process group is
// also continued, in case it was paused, so that it can act on the signal.
func (p *process) terminate() error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return p.signalGroup(syscall.SIGCONT)
}

// forceKill kills the server and anything it forked (SIGKILL).
func (p *process) forceKill() error {
	if err := p.signalGroup(syscall.SIGKILL); err != nil {
		return err
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// pause freezes the server (SIGSTOP).
func (p *process) pause() error { return p.signalGroup(syscall.SIGSTOP) }

// resume unfreezes the server (SIGCONT).
func (p *process) resume() error { return p.signalGroup(syscall.SIGCONT) }
